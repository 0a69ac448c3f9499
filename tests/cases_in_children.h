/*
 * Runs each cmocka case in a child process of its own, for tests whose
 * cases need process-wide state fresh (the PyTorch ABI's pools, its init
 * count, its configuration): a case cannot see what an earlier one did, and
 * one that crashes or hangs (killed at time_limit seconds) fails alone.
 * Include after <cmocka.h>.
 */
#ifndef COOP_TESTS_CASES_IN_CHILDREN_H
#define COOP_TESTS_CASES_IN_CHILDREN_H
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs test in a child of its own; 0 if it passed. */
static int case_in_child(const char *prog, const struct CMUnitTest *test, unsigned time_limit)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "%s: fork: ", prog);
        perror(NULL);
        return 1;
    }
    if (pid == 0) {
        alarm(time_limit);
        const struct CMUnitTest one[] = {*test};
        _exit(cmocka_run_group_tests_name(test->name, one, NULL, NULL) ? 1 : 0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) {
        fprintf(stderr, "%s: waitpid: ", prog);
        perror(NULL);
        return 1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFSIGNALED(status))
        fprintf(stderr, "%s: %s: child killed by signal %d%s\n", prog, test->name, WTERMSIG(status),
                WTERMSIG(status) == SIGALRM ? " (time limit)" : "");
    else
        fprintf(stderr, "%s: %s: child failed\n", prog, test->name);
    return 1;
}

/* Every case of tests[n] in a child; main's exit status: 0 if all passed. */
static int cases_in_children(const char *prog, const struct CMUnitTest *tests, size_t n,
                             unsigned time_limit)
{
    int failed = 0;
    for (size_t i = 0; i < n; i++)
        failed += case_in_child(prog, &tests[i], time_limit);
    if (failed)
        fprintf(stderr, "%s: %d of %zu cases failed\n", prog, failed, n);
    return failed ? 1 : 0;
}
#endif
