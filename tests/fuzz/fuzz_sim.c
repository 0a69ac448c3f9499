/*
 * libFuzzer harness: `coop sim` on a stranger's DTR log. The log is parsed
 * from memory (dtr_log_parse_buffer), built into a simulator program and,
 * when that succeeds, simulated without a budget and then at a budget
 * picked by the input's first byte, under one policy (second byte) and one
 * memory model (third byte). Any input must be refused with a message or
 * simulate to a result (ok, out of memory, thrash), never crash or leak;
 * SIM_ERROR must come with a message.
 *
 * The first three bytes are the knobs; the rest is the log. Logs stop at
 * 64 instructions' worth of bytes (8 KiB) so one input stays milliseconds.
 */
#include <stdio.h>
#include <stdlib.h>

#include "coop.h"
#include "remat/sim.h"
#include "remat/sim_program.h"
#include "trace/dtr_log.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
    if (len < 3 || len > 8192)
        return 0;
    unsigned ratio_byte = data[0], policy = data[1] % SIM_POLICY_COUNT;
    sim_memory memory = data[2] & 1 ? SIM_MEMORY_ARENA : SIM_MEMORY_IDEAL;
    dtr_log log;
    if (dtr_log_parse_buffer("fuzz.jsonl", (const char *)data + 3, len - 3, &log) != COOP_OK) {
        if (!coop_last_error()[0])
            abort();
        return 0;
    }
    sim_program prog;
    coop_status st = sim_program_build(&log, &prog);
    dtr_log_free(&log);
    if (st != COOP_OK) {
        if (!coop_last_error()[0])
            abort();
        return 0;
    }
    sim_options opt = sim_options_default((sim_policy)policy, memory);
    uint64_t peak = sim_peak(&prog, memory);
    sim_outcome unlimited = sim_run(&prog, peak, &opt, 1.0);
    if (unlimited.result == SIM_ERROR && !coop_last_error()[0])
        abort();
    double ratio = (ratio_byte + 1) / 256.0;
    sim_outcome tight = sim_run(&prog, peak, &opt, ratio);
    if (tight.result == SIM_ERROR && !coop_last_error()[0])
        abort();
    if (tight.result == SIM_OK && tight.budget + 1 < (uint64_t)(ratio * (double)peak))
        abort(); /* the budget is the ratio's */
    sim_program_free(&prog);
    return 0;
}
