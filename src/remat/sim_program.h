/*
 * A DTR log compiled into a static operator graph and a schedule, following
 * the DTR simulator's own compilation (simrd parse_file):
 *  - CONSTANT: a zero-cost op with one fresh output, then PIN (unevictable);
 *  - CALL: an op; aliasing results (ALIAS k) share args[k]'s storage and
 *    count 0 bytes;
 *  - MUTATE: copy-on-write as DTR models it: a new op over all args whose
 *    outputs are fresh storages of the mutated args' storage size; the name
 *    is rebound to the new tensor and the old tensor released. (The
 *    recomputable in-place alternative is a runtime option, see
 *    sim_runtime.h);
 *  - COPY: GET (one more handle); COPY_FROM: RELEASE of dst's tensor, GET of
 *    src's; RELEASE: RELEASE (undefined names ignored, as simrd does);
 *  - at the end every tensor still named is PINned (rematerialized first if
 *    evicted), in order of first binding, as simrd's REMATERIALIZE output
 *    condition does.
 * Instructions before ANNOTATE START are skipped.
 *
 * Ids are dense and in creation order: op i's outputs are consecutive tensor
 * ids, a storage's id is given when its root tensor is created, so "created
 * so far" is a comparison with a counter.
 */
#ifndef COOP_REMAT_SIM_PROGRAM_H
#define COOP_REMAT_SIM_PROGRAM_H

#include <stdbool.h>
#include <stdint.h>

#include "coop.h"
#include "trace/dtr_log.h"

typedef enum sim_cmd_kind { SIM_COMPUTE, SIM_GET, SIM_PIN, SIM_RELEASE } sim_cmd_kind;

typedef struct sim_cmd {
    sim_cmd_kind kind;
    uint32_t arg; /* SIM_COMPUTE: op id; else tensor id */
} sim_cmd;

typedef struct sim_op {
    uint64_t cost;        /* ns */
    uint64_t total_size;  /* bytes of fresh outputs */
    uint32_t first_input; /* inputs[first_input .. +num_inputs): tensor ids, duplicates kept */
    uint32_t num_inputs;
    uint32_t first_output; /* tensor ids first_output .. +num_outputs */
    uint32_t num_outputs;
    uint32_t line; /* source line */
    uint32_t name; /* index into the log's op names; UINT32_MAX for constants */
    bool is_constant;
    bool is_mutation; /* compiled from MUTATE */
} sim_op;

typedef struct sim_tensor {
    uint32_t op;
    uint32_t index; /* output index */
    uint32_t storage;
    int32_t alias;        /* input index whose storage this shares, or -1 */
    int32_t mutates;      /* MUTATE outputs: the input index mutated, else -1 */
    uint64_t size;        /* op output size: storage size if fresh, 0 if alias */
    uint32_t first_child; /* children[first_child .. +num_children): consumer outputs */
    uint32_t num_children;
} sim_tensor;

typedef struct sim_storage {
    uint64_t size;
    uint32_t root;         /* tensor id */
    uint32_t first_tensor; /* storage_tensors[first_tensor .. +num_tensors), creation order */
    uint32_t num_tensors;
} sim_storage;

/* A storage's neighbour in the operator graph (DTR's: the storage of an input
 * of one of its tensors' ops, or of a consumer of one of its tensors),
 * present once tensor `since` has been created. */
typedef struct sim_neighbour {
    uint32_t storage;
    uint32_t since; /* tensor id */
} sim_neighbour;

typedef struct sim_program {
    char *name; /* log file name without directories */
    sim_op *ops;
    uint32_t num_ops;
    sim_tensor *tensors;
    uint32_t num_tensors;
    sim_storage *storages;
    uint32_t num_storages;
    uint32_t *inputs;
    uint32_t *children;
    uint32_t *storage_tensors;
    /* neighbours[neighbour_first[s] .. neighbour_first[s + 1]): s's distinct
     * neighbour storages (s itself excluded), by since, then storage */
    uint32_t *neighbour_first;
    sim_neighbour *neighbours;
    sim_cmd *cmds;
    size_t num_cmds;
    uint64_t base_compute; /* sum of op costs: the unlimited run's compute */
} sim_program;

/* The storage of the input that output out of a MUTATE overwrites (out's
 * mutates >= 0). */
static inline uint32_t sim_mutated_storage(const sim_program *p, const sim_op *op, uint32_t out)
{
    return p->tensors[p->inputs[op->first_input + (uint32_t)p->tensors[out].mutates]].storage;
}

/* Compiles a log. Errors (a name used before it is bound, a name bound
 * twice) are COOP_ERR_INVALID with "PATH:LINE: what". */
coop_status sim_program_build(const dtr_log *log, sim_program *out);

/* Reads and compiles a log file. */
coop_status sim_program_load(const char *path, sim_program *out);

void sim_program_free(sim_program *p);

/* The first capacity (items) of the simulator's growable arrays (GROW_ARRAY,
 * growable.h). */
#define SIM_ARRAY_FIRST 256

#endif
