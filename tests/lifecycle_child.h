/*
 * What the lifecycle tests (lifecycle_test, lifecycle_unload_test,
 * lifecycle_cuda_mock_test) need around fork(): a child run under an alarm,
 * so that a deadlock fails the case instead of hanging make check, and the
 * check of how it ended. Include after <cmocka.h>.
 */
#ifndef COOP_TESTS_LIFECYCLE_CHILD_H
#define COOP_TESTS_LIFECYCLE_CHILD_H
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

/* seconds a forked child may take before it counts as deadlocked or hung */
enum { CHILD_LIMIT = 10 };

/* Forks; the child runs fn (which returns its exit status) under an alarm.
 * The child's status as waitpid gives it. */
static inline int in_fork(int (*fn)(void *), void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(CHILD_LIMIT);
        _exit(fn(arg));
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

/* Fails the case unless the child exited with code; a signal is named,
 * the alarm's as the time limit. */
static inline void assert_exited(int status, int code)
{
    if (WIFSIGNALED(status))
        fail_msg("child killed by signal %d%s", WTERMSIG(status),
                 WTERMSIG(status) == SIGALRM ? " (deadlocked or hung: time limit)" : "");
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), code);
}

/* This process's mappings (lines of /proc/self/maps): what a leak of
 * threads' stacks or of loaded libraries grows. */
static inline long mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    long n = 0;
    int ch;
    while ((ch = fgetc(f)) != EOF)
        n += ch == '\n';
    fclose(f);
    return n;
}
#endif
