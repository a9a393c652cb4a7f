/* Everything a plugin needs: #include <mpx/mpx.h> */
#ifndef MPX_MPX_H
#define MPX_MPX_H
#include "mpx/abi.h"
#include "mpx/ops.h"
#include "mpx/precision.h"
#include "mpx/model.h"
#include "mpx/optimizer.h"
#include "mpx/comm.h"
#include "mpx/zero.h"
#include "mpx/numerics.h"
#include "mpx/formats.h"
#endif
