/* test-only precision plugin "shadowme" 2.0.0 claiming ABI (MPX_ABI_MAJOR).(MPX_ABI_MINOR) */
#define FAKE_MAJOR (MPX_ABI_MAJOR)
#define FAKE_MINOR (MPX_ABI_MINOR)
#define FAKE_NAME "shadowme"
#define FAKE_VERSION "2.0.0"
#include "fake_precision.h"
