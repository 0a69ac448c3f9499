/* Internal: what the snapshot code needs from the ABI's per-device state. */
#ifndef COOP_TORCH_ABI_H
#define COOP_TORCH_ABI_H

#include "torch/history.h"

/* Highest device index the ABI accepts, plus one. */
#define COOP_TORCH_MAX_DEVICES 64

/* Device's history (device in [0, COOP_TORCH_MAX_DEVICES)). */
torch_history *torch_abi_history(int device);

#endif
