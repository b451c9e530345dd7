// tilecraft/tc.h -- the header library included by every generated kernel.
// Everything lives in namespace tc; all functions are __device__ __forceinline__.
// See README.md beside this file for the full list.
#pragma once

#include "types.h"
#include "memory.h"
#include "async.h"
#include "math.h"
#include "warp.h"
#include "sync.h"
#include "mma.h"
#include "raster.h"
#include "tma.h"
#include "cluster.h"
#include "wgmma.h"
