#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_list.h"

int cli_split_list(char *s, char **items, int max, const char *prog, const char *option)
{
    /* the whole value for the message, before the commas become NULs */
    char *whole = strdup(s);
    const char *shown = whole ? whole : "";
    int n = 0;
    for (char *p = s;; p++) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (!*p) {
            fprintf(stderr, "%s: %s: item %d of '%s' is empty\n", prog, option, n + 1, shown);
            n = -1;
            break;
        }
        if (n == max) {
            fprintf(stderr, "%s: %s: more than %d items in '%s'\n", prog, option, max, shown);
            n = -1;
            break;
        }
        items[n++] = p;
        if (!comma)
            break;
        p = comma;
    }
    free(whole);
    return n;
}
