/* coop sim: rematerialization under a memory budget on operator logs. */
#include <ctype.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli_getopt.h"
#include "cli/cli_inputs.h"
#include "cli/cli_list.h"
#include "cli/cli_output.h"
#include "cli/commands.h"
#include "remat/sim.h"
#include "remat/sim_lib.h"
#include "trace/trace.h"
#include "utf8.h"

#define MAX_ITEMS 64

static void usage(FILE *out)
{
    fprintf(out,
            "usage: coop sim [--policy LIST] [--memory ideal|arena] [--budget LIST] [--json]\n"
            "                [--no-min-ratio] [--stable-min-ratio[=STEP]]\n"
            "                [--overhead-limit X] [--inplace on|off]\n"
            "                [--partition off|THRESHOLD] [--plain-walk] [--no-eq-cache]\n"
            "                [--engine sim|lib] LOG ...\n"
            "\n"
            "Replays DTR-format operator logs (JSON lines, .gz read transparently) under\n"
            "budget = ratio x the peak of an unlimited run, evicting and recomputing tensors.\n"
            "The peak is the live bytes of the ideal model's unlimited run (arena: sizes in\n"
            "512-byte blocks), without placement or fragmentation: in the arena, ratio 1 is\n"
            "already under pressure and can evict (or fail). A LOG may be a pipe, or '-'\n"
            "for standard input.\n"
            "\n"
            "  --policy LIST      comma-separated: dtr, dtr-full, dtr-local, dte, lru, size, coop\n"
            "                     (arena only; costs a tensor by c_live, what recomputation\n"
            "                     needs; coop-live is another name for it, refused beside\n"
            "                     it), and coop's ablations coop-nopart (no cheap tensor\n"
            "                     partitioning),\n"
            "                     coop-cow (copy-on-write instead of recomputable in-place),\n"
            "                     coop-dte (DTE's score in the window), coop-sum (sum of\n"
            "                     window costs, not per byte), coop-eq (c_eq of union-find\n"
            "                     classes as each tensor's cost), coop-comp (c_comp, the\n"
            "                     whole evicted component: coop's cost before c_live)\n"
            "                     (default: ideal dtr,dtr-full,lru, DTR's own; arena\n"
            "                     coop,dtr,dte, the paper's comparison; --engine lib:\n"
            "                     coop,coop-eq,dtr,dte)\n"
            "  --memory MODEL     ideal: only the sum of resident bytes is limited (default);\n"
            "                     arena: every tensor is a block of libcoop's pool (host\n"
            "                     backend, one segment of the budget's size)\n"
            "  --budget LIST      comma-separated ratios in (0, 1] (default 0.9,0.7,0.5,0.3)\n"
            "  --json             one JSON object per line instead of a table\n"
            "  --no-min-ratio     skip the bisection for min_budget_ratio (reported as null)\n"
            "  --stable-min-ratio[=STEP]\n"
            "                     also report stable_min_ratio: the smallest ratio of the grid\n"
            "                     1, 1-STEP, 1-2 STEP, ... from which every grid ratio up to 1\n"
            "                     succeeds (null if 1 fails; STEP default 0.0125: up to 80\n"
            "                     runs per log and policy). min_budget_ratio, the smallest\n"
            "                     feasible ratio by bisection (to 0.005), is one feasible\n"
            "                     ratio where the bisection's probes landed: feasibility is\n"
            "                     not monotone near the thrash limit, and ratios above it can\n"
            "                     fail\n"
            "  --overhead-limit X a run thrashes beyond total / base compute X (default 2),\n"
            "                     or beyond 2^62 ns of recomputation\n"
            "  --inplace on|off   MUTATE keeps its buffer (default: on for coop, off otherwise,\n"
            "                     which is DTR's copy-on-write)\n"
            "  --partition T|off  place tensors cheaper than T ns/byte at the high end of free\n"
            "                     blocks (default: 1e-2 for coop, off otherwise)\n"
            "  --plain-walk       coop's window search visits every block instead of skipping\n"
            "                     runs of pinned or locked ones (same results; for timing)\n"
            "  --no-eq-cache      dtr and coop-comp walk a tensor's neighbours at every cost\n"
            "                     evaluation instead of reusing its cached classes, and\n"
            "                     coop walks its regions instead of reusing its cached\n"
            "                     c_live (same results; for timing)\n"
            "  --engine E         sim: the simulator's own runtime (default); lib: libcoop's\n"
            "                     public remat API (coop_remat_*, coop_tensor_*) driven by\n"
            "                     the log over the arena model's pool (implies --memory\n"
            "                     arena; policies coop, coop-comp, coop-eq, coop-nopart,\n"
            "                     coop-cow, dtr, dtr-local, dte, lru, size); search times\n"
            "                     are the library's own (coop_remat_stats)\n"
            "  -h, --help         this text\n"
            "\n"
            "Columns (JSON keys in docs/remat.md): ratio, the budget ratio; result ok, oom\n"
            "(nothing left to evict) or thrash (recomputation past --overhead-limit);\n"
            "overhead = (base + recompute) / base compute, 1 is free; evictions; remat_ops\n"
            "(recomputed ops); search_p50 / search_p99, the median and 99th percentile CPU ns\n"
            "of placing a request that did not fit; heur_evals (eviction-cost evaluations);\n"
            "eq_walks (c_eq evaluations that walked a tensor's neighbours: dtr, coop-comp)\n"
            "and blocks (blocks coop's window searches visited), in the table only (not\n"
            "--json, nor --engine lib); frag, the mean free share of the budget at eviction\n"
            "searches; ffail, searches with enough free bytes but no hole that fits\n"
            "(fragmentation); min_ratio, the smallest feasible ratio found by bisection;\n"
            "stable, stable_min_ratio (--stable-min-ratio).\n"
            "--engine lib adds searches (allocations that evicted) and what the API maps\n"
            "only approximately: inplace (ops mutated in place), multi_call (ops of several\n"
            "calls), views (aliasing results), zero_size (0-byte outputs). Lower is better for\n"
            "overhead through ffail, and min_ratio ('none': no ratio runs, not even 1; '-':\n"
            "not computed). On an oom or thrash row, overhead and the counters cover the run\n"
            "until it stopped. Exit status 0 when every log ran, 1 when a run failed, 2 on a\n"
            "usage error or a log that cannot be read (file and line in the message).\n"
            "A LOG that cannot be opened is refused before any run; a bad log is named and\n"
            "the other logs still run (status 2 at the end), as in coop replay.\n");
}

/* Whether two policy names parse to one policy and variant (coop-live is
 * coop); the options not compared are the command line's, the same for
 * all. */
static bool same_policy(const sim_options *a, const sim_options *b)
{
    bool same_threshold = isnan(a->cheap_threshold) ? isnan(b->cheap_threshold)
                                                    : a->cheap_threshold == b->cheap_threshold;
    return a->policy == b->policy && a->inplace == b->inplace && same_threshold &&
           a->window_cost == b->window_cost;
}

/* The searches that end a row: the bisection's min_budget_ratio (have_min),
 * and the grid's stable_min_ratio where asked (want_stable). */
typedef struct sim_thresholds {
    double min_ratio, stable;
    int have_min, want_stable;
} sim_thresholds;

/* One row of results, a JSON object (--json) or a table line: both come from
 * the same calls, so they list the same fields in the same order. */
typedef struct sim_row {
    bool json;
    unsigned fields; /* fields printed so far (JSON: the first opens the object) */
} sim_row;

/* Starts a field: true if this row prints it, a JSON one after its key.
 * key NULL: table only; width 0: JSON only. */
static bool row_field(sim_row *r, const char *key, int width)
{
    if (!r->json)
        return width > 0;
    if (!key)
        return false;
    printf("%c\"%s\":", r->fields++ ? ',' : '{', key);
    return true;
}

/* Writes s as a JSON string: quotes, backslashes and control characters
 * escaped (a log's file name may hold any of them), and bytes that are not
 * UTF-8 as U+FFFD, so that every row parses. */
static void print_json_string(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    putchar('"');
    while (*p) {
        unsigned char c = *p;
        if (c == '"' || c == '\\') {
            printf("\\%c", c);
            p++;
        } else if (c < 0x20) {
            printf("\\u%04x", c);
            p++;
        } else if (c < 0x80) {
            putchar(c);
            p++;
        } else {
            size_t n = utf8_sequence_length(p); /* 0: not UTF-8 */
            if (n) {
                fwrite(p, 1, n, stdout);
                p += n;
            } else {
                fputs("\\ufffd", stdout);
                p++;
            }
        }
    }
    putchar('"');
}

/* A text column, left-aligned (a longer text widens its cell). */
static void row_text(sim_row *r, const char *key, int width, const char *v)
{
    if (!row_field(r, key, width))
        return;
    if (r->json)
        print_json_string(v);
    else
        printf("%-*s ", width, v);
}

static void row_count(sim_row *r, const char *key, int width, uint64_t v)
{
    if (!row_field(r, key, width))
        return;
    if (r->json)
        printf("%llu", (unsigned long long)v);
    else
        printf("%*llu ", width, (unsigned long long)v);
}

/* A real column with prec decimals in the table; in JSON 6 decimals, or
 * 4 significant digits where as_given (a ratio, printed as the user wrote it). */
static void row_real(sim_row *r, const char *key, int width, int prec, bool as_given, double v)
{
    if (!row_field(r, key, width))
        return;
    if (!isfinite(v) && r->json) /* JSON has no NaN or infinity: "-nan" broke rows */
        fputs("null", stdout);
    else if (!isfinite(v))
        printf("%*s ", width, "-");
    else if (!r->json)
        printf("%*.*f ", width, prec, v);
    else if (as_given) /* enough digits that two ratios given apart print apart */
        printf("%.10g", v);
    else
        printf("%.6f", v);
}

/* A ratio found by a search (have: computed; < 0: none feasible); the
 * table's column is width wide, followed by sep. */
static void row_ratio(sim_row *r, const char *key, int width, double v, int have, char sep)
{
    bool found = have && v >= 0;
    if (r->json) {
        row_field(r, key, 0);
        if (found)
            printf("%.4f", v);
        else
            printf("null");
    } else if (found) {
        printf("%*.4f%c", width, v, sep);
    } else {
        printf("%*s%c", width, have ? "none" : "-", sep);
    }
}

/* Ends the row with the log's min_budget_ratio (have_min: computed; < 0:
 * none feasible), and where asked (want_stable) its stable_min_ratio: a
 * field only then, so that the default rows keep the names. */
static void row_end(sim_row *r, const sim_thresholds *th)
{
    row_ratio(r, "min_budget_ratio", 9, th->min_ratio, th->have_min, th->want_stable ? ' ' : '\n');
    if (th->want_stable)
        row_ratio(r, "stable_min_ratio", 9, th->stable, 1, '\n');
    if (r->json)
        printf("}\n");
}

/* One run's row; n: the lib engine's counts, NULL for the simulator. */
/* The table's log column: wide enough for every log's name (the name a
 * row prints, the path after its last slash), at least 28. Clipped at 28
 * before, "densenet121-train-step.ops.jsonl.gz" and its siblings were told
 * apart only by their first 28 characters. */
static int log_column_width(char *const *paths, int n)
{
    size_t width = 28;
    for (int i = 0; i < n; i++) {
        const char *slash = strrchr(paths[i], '/');
        size_t len = strlen(slash ? slash + 1 : paths[i]);
        if (len > width)
            width = len;
    }
    return width > INT_MAX ? INT_MAX : (int)width;
}

static void print_row(bool json, int log_width, const char *log, const char *policy,
                      const char *memory, const sim_outcome *o, const sim_lib_counts *n,
                      const sim_thresholds *th)
{
    sim_row r = {.json = json};
    row_text(&r, "log", log_width, log);
    if (n) /* JSON names the engine first, the table after the policy */
        row_text(&r, "engine", 0, "lib");
    row_text(&r, "policy", 9, policy);
    row_text(&r, "memory", n ? 0 : 6, memory);
    if (n)
        row_text(&r, NULL, 6, "lib");
    row_real(&r, "budget_ratio", 5, 2, true, o->budget_ratio);
    row_text(&r, "result", 6, sim_result_name(o->result));
    row_real(&r, "overhead", 8, 4, false, o->overhead);
    row_count(&r, "evictions", 9, o->evictions);
    row_count(&r, "remat_ops", 9, o->remat_ops);
    row_count(&r, "search_ns_p50", 10, o->search_ns_p50);
    row_count(&r, "search_ns_p99", 10, o->search_ns_p99);
    row_count(&r, "heuristic_evals", 12, o->heuristic_evals);
    if (!n) { /* the simulator's search work, in its table only */
        row_count(&r, NULL, 10, o->eq_walks);
        row_count(&r, NULL, 10, o->blocks_visited);
    }
    row_real(&r, "frag_at_evict", 6, 3, false, o->frag_at_evict);
    row_count(&r, "frag_failures", 6, o->frag_failures);
    if (n) {
        row_count(&r, "searches", 9, n->searches);
        row_count(&r, "inplace_ops", 8, n->inplace_ops);
        row_count(&r, "multi_call_ops", 10, n->multi_call_ops);
        row_count(&r, "view_outputs", 9, n->view_outputs);
        row_count(&r, "zero_size", 9, n->zero_size);
    }
    row_end(&r, th);
}

/* A log refused as malformed that is a regular file of another trace
 * format, an allocation trace (coop replay's input, given to sim by
 * mistake: the bundled traces sit beside the op logs), gets a second line
 * saying so; the JSON parser's words about its first byte ("'[' or '{'
 * expected near '#'") do not. Pipes are left alone: detection would read
 * what the simulator has consumed. */
static void say_if_another_format(const char *path)
{
    struct stat st;
    trace_format format;
    if (stat(path, &st) || !S_ISREG(st.st_mode) || trace_detect_format(path, &format) ||
        format == TRACE_FORMAT_DTR)
        return;
    const char *what = format == TRACE_FORMAT_PICKLE ? "a PyTorch memory snapshot"
                       : format == TRACE_FORMAT_TEXT ? "a coop text trace"
                                                     : "a minimalloc CSV";
    fprintf(stderr,
            "coop sim: %s is %s, an allocation trace: coop replay reads it; coop sim reads "
            "operator logs (DTR logs, the *.ops.jsonl.gz op traces)\n",
            path, what);
}

/* Whether text is a number in strtod's form, whole, into *out: not "" (strtod
 * takes it as 0), nor with a leading space (strtod skips them) or anything
 * after the number. The number options' one reading; each adds its range. */
static bool whole_number(const char *text, double *out)
{
    char *end;
    *out = strtod(text, &end);
    return end != text && !*end && !isspace((unsigned char)*text);
}

/* The table's header: the columns print_row writes. */
static void print_header(bool lib, int log_width, bool want_stable)
{
    if (lib)
        printf("%-*s %-9s %-6s %5s %-6s %8s %9s %9s %10s %10s %12s %6s %6s %9s %8s %10s %9s "
               "%9s %9s",
               log_width, "log", "policy", "engine", "ratio", "result", "overhead", "evictions",
               "remat_ops", "search_p50", "search_p99", "heur_evals", "frag", "ffail", "searches",
               "inplace", "multi_call", "views", "zero_size", "min_ratio");
    else
        printf("%-*s %-9s %-6s %5s %-6s %8s %9s %9s %10s %10s %12s %10s %10s %6s %6s %9s",
               log_width, "log", "policy", "memory", "ratio", "result", "overhead", "evictions",
               "remat_ops", "search_p50", "search_p99", "heur_evals", "eq_walks", "blocks", "frag",
               "ffail", "min_ratio");
    printf(want_stable ? " %9s\n" : "\n", "stable");
}

/* A run that ended in an error (host memory ran out: the simulator's or the
 * pool's) ends the command, as in replay: the runs after it would fail
 * too, one message each, or measure a host short of memory. Says why
 * (policy: the threshold search's, or NULL), frees prog and returns the
 * exit status, at least 1. Before, the run's row was printed ("error") and
 * the next run began; a threshold search took the error for an infeasible
 * ratio and printed a min_budget_ratio that host memory had moved. */
static int stop_on_error(sim_program *prog, const char *log, const char *policy, int status)
{
    fprintf(stderr, "coop sim: %s: %s%s%s\n", log, policy ? policy : "", policy ? ": " : "",
            coop_last_error());
    sim_program_free(prog);
    return status > 1 ? status : 1;
}

int cmd_sim(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"policy", required_argument, 0, 'p'},
        {"memory", required_argument, 0, 'm'},
        {"budget", required_argument, 0, 'b'},
        {"json", no_argument, 0, 'j'},
        {"no-min-ratio", no_argument, 0, 'n'},
        {"stable-min-ratio", optional_argument, 0, 'S'},
        {"overhead-limit", required_argument, 0, 'o'},
        {"inplace", required_argument, 0, 'i'},
        {"partition", required_argument, 0, 't'},
        {"plain-walk", no_argument, 0, 'w'},
        {"no-eq-cache", no_argument, 0, 'e'},
        {"engine", required_argument, 0, 'E'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    /* the lists are split in place, in argv (no copy into a fixed buffer,
     * which cut lists of 512 characters or more short) or in these */
    char default_budgets[] = "0.9,0.7,0.5,0.3", default_sim_policies[] = "dtr,dtr-full,lru",
         default_arena_policies[] = "coop,dtr,dte", default_lib_policies[] = "coop,coop-eq,dtr,dte";
    char *policy_list = NULL, *budget_list = default_budgets;
    const char *memory = NULL; /* ideal, or arena for --engine lib */
    const char *engine = "sim";
    int json = 0, want_min = 1, want_stable = 0;
    bool stable_bare = false; /* --stable-min-ratio without =STEP */
    double stable_step = SIM_STABLE_STEP;
    double overhead_limit = 2.0, threshold_opt = NAN;
    int inplace_opt = -1, plain_walk = 0, no_eq_cache = 0;
    optind = 1;
    opterr = 0; /* getopt would name the program "sim": the messages are ours */
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            policy_list = optarg;
            break;
        case 'b':
            budget_list = optarg;
            break;
        case 'm':
            memory = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'E':
            engine = optarg;
            break;
        case 'n':
            want_min = 0;
            break;
        case 'S':
            want_stable = 1;
            stable_bare = !optarg;
            if (optarg) {
                /* 1e-4: at most 10^4 runs per log and policy */
                if (!whole_number(optarg, &stable_step) ||
                    !(stable_step >= 1e-4 && stable_step <= 1.0)) {
                    fprintf(stderr,
                            "coop sim: --stable-min-ratio's step must be a number in [0.0001, "
                            "1], not '%s'\n",
                            optarg);
                    return 2;
                }
            }
            break;
        case 'w':
            plain_walk = 1;
            break;
        case 'e':
            no_eq_cache = 1;
            break;
        case 'o': {
            if (!whole_number(optarg, &overhead_limit) || !isfinite(overhead_limit) ||
                !(overhead_limit >= 1.0)) {
                fprintf(stderr,
                        "coop sim: --overhead-limit must be a finite number >= 1, not '%s'\n",
                        optarg);
                return 2;
            }
            break;
        }
        case 'i':
            if (!strcmp(optarg, "on") || !strcmp(optarg, "off")) {
                inplace_opt = !strcmp(optarg, "on");
                break;
            }
            fprintf(stderr, "coop sim: --inplace takes on or off, not '%s'\n", optarg);
            return 2;
        case 't': {
            if (!strcmp(optarg, "off"))
                threshold_opt = -1.0;
            else if (!whole_number(optarg, &threshold_opt) || !(threshold_opt >= 0)) {
                fprintf(stderr,
                        "coop sim: --partition takes off or a threshold >= 0 (ns/byte), "
                        "not '%s'\n",
                        optarg);
                return 2;
            }
            break;
        }
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            cli_getopt_error("coop sim", c, argv, longopts);
            return 2;
        default:
            cli_getopt_error("coop sim", c, argv, longopts);
            usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "coop sim: no LOG given\n");
        usage(stderr);
        return 2;
    }
    bool lib = !strcmp(engine, "lib");
    if (!lib && strcmp(engine, "sim")) {
        fprintf(stderr, "coop sim: --engine must be sim or lib, not '%s'\n", engine);
        return 2;
    }
    if (!memory)
        memory = lib ? "arena" : "ideal";
    if (lib && strcmp(memory, "arena")) {
        fprintf(stderr,
                "coop sim: --engine lib runs the remat API over a pool: --memory "
                "arena only, not '%s'\n",
                memory);
        return 2;
    }
    /* the lib engine lacks dtr-full; coop needs the arena, where it is what
     * a run without --policy is for */
    if (!policy_list)
        policy_list = lib                        ? default_lib_policies
                      : !strcmp(memory, "arena") ? default_arena_policies
                                                 : default_sim_policies;
    sim_memory mem_model;
    if (!strcmp(memory, "ideal")) {
        mem_model = SIM_MEMORY_IDEAL;
    } else if (!strcmp(memory, "arena")) {
        mem_model = SIM_MEMORY_ARENA;
    } else {
        fprintf(stderr, "coop sim: --memory must be ideal or arena, not '%s'\n", memory);
        return 2;
    }
    char *policy_items[MAX_ITEMS], *budget_items[MAX_ITEMS];
    int np = cli_split_list(policy_list, policy_items, MAX_ITEMS, "coop sim", "--policy");
    if (np < 0)
        return 2;
    int nb = cli_split_list(budget_list, budget_items, MAX_ITEMS, "coop sim", "--budget");
    if (nb < 0)
        return 2;
    sim_options options[MAX_ITEMS], named[MAX_ITEMS]; /* named: before the overrides */
    double ratios[MAX_ITEMS];
    for (int i = 0; i < np; i++) {
        for (int j = 0; j < i; j++)
            if (!strcmp(policy_items[i], policy_items[j])) {
                fprintf(stderr, "coop sim: policy '%s' is listed twice\n", policy_items[i]);
                return 2;
            }
        options[i] = sim_options_default(SIM_POLICY_DTR, mem_model);
        options[i].overhead_limit = overhead_limit;
        if (sim_options_parse_policy(policy_items[i], &options[i])) {
            fprintf(stderr,
                    "coop sim: unknown policy '%s' (dtr, dtr-full, dtr-local, dte, lru, "
                    "size, coop, coop-nopart, coop-cow, coop-dte, coop-sum, coop-eq, coop-comp, "
                    "coop-live)\n",
                    policy_items[i]);
            return 2;
        }
        /* one policy under two names gave two rows alike, as a name
         * listed twice did: refused the same way. Compared as named, before
         * --inplace and --partition, which can make variants alike too
         * (coop and coop-nopart under --partition; tests use that) */
        named[i] = options[i];
        for (int j = 0; j < i; j++)
            if (same_policy(&named[j], &named[i])) {
                fprintf(stderr,
                        "coop sim: policies '%s' and '%s' are one policy (two names of it): "
                        "their rows would be the same\n",
                        policy_items[j], policy_items[i]);
                return 2;
            }
        if (inplace_opt >= 0)
            options[i].inplace = inplace_opt;
        options[i].plain_window_walk = plain_walk;
        options[i].no_eq_cache = no_eq_cache;
        if (!isnan(threshold_opt))
            options[i].cheap_threshold = threshold_opt;
        coop_remat_policy lib_policy;
        if (lib && sim_lib_policy(&options[i], &lib_policy)) {
            fprintf(stderr, "coop sim: --engine lib cannot run policy '%s': %s\n", policy_items[i],
                    coop_last_error());
            return 2;
        }
        if (options[i].policy == SIM_POLICY_COOP && mem_model == SIM_MEMORY_IDEAL) {
            fprintf(stderr, "coop sim: policy coop needs --memory arena (it evicts windows of "
                            "address-adjacent blocks)\n");
            return 2;
        }
    }
    for (int i = 0; i < nb; i++) {
        for (int j = 0; j < i; j++)
            if (!strcmp(budget_items[i], budget_items[j])) {
                fprintf(stderr, "coop sim: budget ratio '%s' is listed twice\n", budget_items[i]);
                return 2;
            }
        if (!whole_number(budget_items[i], &ratios[i]) || !(ratios[i] > 0 && ratios[i] <= 1.0)) {
            fprintf(stderr, "coop sim: budget ratio '%s' is not a number in (0, 1]\n",
                    budget_items[i]);
            return 2;
        }
        /* one ratio written two ways (0.5, 0.50, 0x1p-1), or two that the
         * rows print alike (row_real: 10 digits), gave two rows alike, as
         * a ratio listed twice did; plot_sim.py refuses the second */
        char shown[32], other[32];
        snprintf(shown, sizeof shown, "%.10g", ratios[i]);
        for (int j = 0; j < i; j++) {
            snprintf(other, sizeof other, "%.10g", ratios[j]);
            if (!strcmp(shown, other)) {
                fprintf(stderr,
                        "coop sim: budget ratios '%s' and '%s' are one ratio (%s in the rows)\n",
                        budget_items[j], budget_items[i], shown);
                return 2;
            }
        }
    }
    /* every log openable before the first row: a typo in the last path
     * should not wait for the runs of the logs before it */
    if (!cli_inputs_name_stdin("coop sim", argv + optind, (size_t)(argc - optind)))
        return 2;
    /* STEP is optional, so it is attached with '=': "--stable-min-ratio 0.1"
     * makes 0.1 a LOG, and "0.1: cannot open" alone did not say why */
    for (int i = optind; stable_bare && i < argc; i++) {
        double step;
        struct stat st;
        if (whole_number(argv[i], &step) && stat(argv[i], &st)) {
            fprintf(stderr,
                    "coop sim: '%s' is read as a LOG: give the step as "
                    "--stable-min-ratio=%s\n",
                    argv[i], argv[i]);
            return 2;
        }
    }
    if (!cli_inputs_readable("coop sim", argv + optind, (size_t)(argc - optind)))
        return 2;
    int status = 0;
    int log_width = log_column_width(argv + optind, argc - optind);
    bool header_due = !json; /* printed above the first row: a log that
                              * cannot be read gets no header alone */
    for (int a = optind; a < argc; a++) {
        sim_program prog;
        coop_status loaded = sim_program_load(argv[a], &prog);
        if (loaded != COOP_OK) {
            fprintf(stderr, "coop sim: %s\n", coop_last_error());
            if (loaded == COOP_ERR_INVALID)
                say_if_another_format(argv[a]);
            /* a bad or unreadable log is an input error (2), as in replay
             * and convert; running out of memory is the work failing (1),
             * and ends the command (stop_on_error) */
            if (loaded == COOP_ERR_HOST_NOMEM)
                return status > 1 ? status : 1;
            status = loaded == COOP_ERR_INVALID ? 2 : status > 1 ? status : 1;
            continue;
        }
        uint64_t peak = sim_peak(&prog, mem_model);
        if (!peak && coop_last_error()[0]) /* out of host memory: no budget to take */
            return stop_on_error(&prog, argv[a], NULL, status);
        /* budget = ratio x peak, in whole bytes: a ratio in (0, 1] so small
         * that nothing is left is no budget at all; in the arena, neither is
         * one below a 512-byte block (the bisection's probes there are oom) */
        int zero_budget = 0;
        for (int k = 0; k < nb; k++) {
            uint64_t bytes = (uint64_t)((double)peak * ratios[k]);
            if (peak && sim_capacity(mem_model, bytes) == 0) {
                fprintf(stderr,
                        "coop sim: %s: budget ratio '%s' gives %s of 0 bytes (%llu of the peak's "
                        "%llu bytes%s)\n",
                        argv[a], budget_items[k],
                        mem_model == SIM_MEMORY_ARENA ? "an arena" : "a budget",
                        (unsigned long long)bytes, (unsigned long long)peak,
                        mem_model == SIM_MEMORY_ARENA ? ", below one 512-byte block" : "");
                zero_budget = 1;
            }
        }
        if (zero_budget) {
            sim_program_free(&prog);
            status = 2;
            continue;
        }
        for (int i = 0; i < np; i++) {
            sim_options opt = options[i];
            sim_thresholds th = {.have_min = want_min, .want_stable = want_stable};
            if (want_min)
                th.min_ratio = lib ? sim_lib_min_budget_ratio(&prog, peak, &opt, 0.005)
                                   : sim_min_budget_ratio(&prog, peak, &opt, 0.005);
            if (isnan(th.min_ratio)) /* a run's error, not a ratio found */
                return stop_on_error(&prog, prog.name, policy_items[i], status);
            if (want_stable)
                th.stable = lib ? sim_lib_stable_min_ratio(&prog, peak, &opt, stable_step)
                                : sim_stable_min_ratio(&prog, peak, &opt, stable_step);
            if (isnan(th.stable))
                return stop_on_error(&prog, prog.name, policy_items[i], status);
            for (int k = 0; k < nb; k++) {
                sim_lib_counts n;
                sim_outcome o = lib ? sim_lib_run(&prog, peak, &opt, ratios[k], &n)
                                    : sim_run(&prog, peak, &opt, ratios[k]);
                if (o.result == SIM_ERROR)
                    return stop_on_error(&prog, prog.name, NULL, status);
                if (header_due) {
                    print_header(lib, log_width, want_stable);
                    header_due = false;
                }
                print_row(json, log_width, prog.name, policy_items[i], memory, &o, lib ? &n : NULL,
                          &th);
                /* each row is out as it is made; one that cannot be written
                 * (a full disk, a closed pipe with SIGPIPE ignored) stops
                 * the runs: their rows would be lost too. Said at exit. */
                if (!cli_stdout_ok()) {
                    sim_program_free(&prog);
                    return status > 1 ? status : 1;
                }
            }
        }
        sim_program_free(&prog);
    }
    return status;
}
