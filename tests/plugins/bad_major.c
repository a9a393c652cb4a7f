/* test-only precision plugin "fakemajor" 1.0.0 claiming ABI (MPX_ABI_MAJOR + 1).(MPX_ABI_MINOR) */
#define FAKE_MAJOR (MPX_ABI_MAJOR + 1)
#define FAKE_MINOR (MPX_ABI_MINOR)
#define FAKE_NAME "fakemajor"
#define FAKE_VERSION "1.0.0"
#include "fake_precision.h"
