/* test-only precision plugin "shadowme" 1.0.0 claiming ABI (MPX_ABI_MAJOR).(MPX_ABI_MINOR) */
#define FAKE_MAJOR (MPX_ABI_MAJOR)
#define FAKE_MINOR (MPX_ABI_MINOR)
#define FAKE_NAME "shadowme"
#define FAKE_VERSION "1.0.0"
#include "fake_precision.h"
