/*
 * DTR operator logs (uwsampl/dtr-prototype): one JSON object per line.
 *
 * The reader keeps the log at the level of operators, not allocations:
 * CALL / MUTATE carry their arguments, results, per-result MEMORY and ALIAS
 * lines folded in, and their measured time. Tensor names are interned to
 * dense ids (0 .. num_names-1) in order of first appearance. Every
 * instruction remembers its line (1-based) so later stages can report
 * "FILE:LINE: what" for semantic errors too.
 */
#ifndef COOP_TRACE_DTR_LOG_H
#define COOP_TRACE_DTR_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "coop.h"

typedef enum dtr_kind {
    DTR_CONSTANT,  /* name, memory (bytes): a model constant (weights, inputs) */
    DTR_CALL,      /* op: args -> results, each with memory and alias */
    DTR_MUTATE,    /* op: args, mutate = indices of args changed in place */
    DTR_COPY,      /* name (dst) becomes another handle on src */
    DTR_COPY_FROM, /* name (dst) is rebound to src; dst's old tensor released */
    DTR_RELEASE,   /* name's handle dropped */
    DTR_ANNOTATE   /* annotation: START or BACKWARD */
} dtr_kind;

typedef enum dtr_annotation { DTR_ANNOT_START, DTR_ANNOT_BACKWARD, DTR_ANNOT_OTHER } dtr_annotation;

/* ALIAS value of a result with fresh storage. */
#define DTR_FRESH (-1)

typedef struct dtr_result {
    uint32_t name;
    uint64_t memory; /* bytes of the result's storage (as logged) */
    int32_t alias;   /* DTR_FRESH, or k: shares the storage of args[k] */
} dtr_result;

typedef struct dtr_instr {
    dtr_kind kind;
    uint32_t line;      /* 1-based line of the instruction in the file */
    uint32_t name;      /* CONSTANT, RELEASE: the tensor; COPY, COPY_FROM: dst */
    uint32_t src;       /* COPY, COPY_FROM */
    uint64_t memory;    /* CONSTANT */
    uint64_t time_ns;   /* CALL, MUTATE: measured cost */
    uint32_t op;        /* CALL, MUTATE: index into op_names */
    uint32_t first_arg; /* CALL, MUTATE: args[first_arg .. +num_args) */
    uint32_t num_args;
    uint32_t first_result; /* CALL: results[first_result .. +num_results) */
    uint32_t num_results;
    uint32_t first_mutate; /* MUTATE: mutates[first_mutate .. +num_mutates): indices into args */
    uint32_t num_mutates;
    dtr_annotation annotation;
} dtr_instr;

typedef struct dtr_log {
    char *path;
    dtr_instr *instrs;
    size_t num_instrs;
    size_t start;   /* index of the first instruction after ANNOTATE START (0 if none) */
    uint32_t *args; /* name ids */
    size_t num_args;
    dtr_result *results;
    size_t num_results;
    uint32_t *mutates;
    size_t num_mutates;
    char **names; /* tensor names by id */
    uint32_t num_names;
    char **op_names; /* aten op names by index */
    uint32_t num_op_names;
} dtr_log;

/* Reads a DTR log (plain or gzip). Errors: COOP_ERR_INVALID with
 * "PATH:LINE: what" in coop_last_error() (a log without instructions, empty
 * or blank, is one); *out is left zeroed. */
coop_status dtr_log_read(const char *path, dtr_log *out);

/* Parses a log held in memory (tests); name is used in messages. */
coop_status dtr_log_parse_buffer(const char *name, const char *text, size_t len, dtr_log *out);

void dtr_log_free(dtr_log *log);

#endif
