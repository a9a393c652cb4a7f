/* test-only precision plugin "fakeminor" 1.0.0 claiming ABI (MPX_ABI_MAJOR).(MPX_ABI_MINOR + 1) */
#define FAKE_MAJOR (MPX_ABI_MAJOR)
#define FAKE_MINOR (MPX_ABI_MINOR + 1)
#define FAKE_NAME "fakeminor"
#define FAKE_VERSION "1.0.0"
#include "fake_precision.h"
