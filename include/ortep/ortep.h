/* ortep.h: the whole public API. */
#ifndef ORTEP_H
#define ORTEP_H

#include "ortep/common.h"
#include "ortep/status.h"
#include "ortep/device.h"
#include "ortep/buffer.h"
#include "ortep/allocator.h"
#include "ortep/governor.h"
#include "ortep/arena.h"
#include "ortep/slab.h"
#include "ortep/planner.h"
#include "ortep/hooks.h"
#include "ortep/dtype.h"
#include "ortep/error_word.h"
#include "ortep/ir.h"
#include "ortep/ep.h"
#include "ortep/tensor.h"
#include "ortep/cpu_ep.h"
#include "ortep/cuda_ep.h"
#include "ortep/safetensors.h"
#include "ortep/gguf.h"
#include "ortep/session.h"
#include "ortep/model.h"
#include "ortep/decode.h"
#include "ortep/batch.h"
#include "ortep/tokenizer.h"

#endif
