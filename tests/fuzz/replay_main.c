/*
 * Runs a fuzz harness without libFuzzer: every file named on the command
 * line (or inside a directory named) is passed once to LLVMFuzzerTestOneInput.
 * make check builds each harness with this driver and replays the seed
 * corpora and every input a fuzzer once crashed on (tests/fuzz/regressions),
 * so the fixes stay fixed in the plain and the sanitized builds.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return 1;
    }
    size_t cap = 4096, len = 0, got;
    unsigned char *data = malloc(cap);
    while (data && (got = fread(data + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            unsigned char *grown = realloc(data, cap *= 2);
            if (!grown)
                free(data);
            data = grown;
        }
    }
    fclose(f);
    if (!data) {
        fprintf(stderr, "%s: out of memory\n", path);
        return 1;
    }
    printf("%s (%zu bytes)\n", path, len);
    fflush(stdout);
    LLVMFuzzerTestOneInput(data, len);
    free(data);
    return 0;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The directory's regular files in name order (a stable replay order). */
static int replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "%s: cannot open directory\n", dir);
        return 1;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char **grown = realloc(names, (n + 1) * sizeof *names);
        if (!grown)
            break;
        names = grown;
        size_t size = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(size);
        if (!names[n])
            break;
        snprintf(names[n++], size, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (n > 1) /* an empty directory leaves names NULL: qsort wants a valid pointer */
        qsort(names, n, sizeof *names, compare_names);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad |= replay_file(names[i]);
        free(names[i]);
    }
    free(names);
    return bad;
}

int main(int argc, char **argv)
{
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "%s: no such file or directory\n", argv[i]);
            bad = 1;
        } else {
            bad |= S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]);
        }
    }
    return bad;
}
