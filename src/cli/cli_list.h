/* Comma-separated option values (coop sim --policy / --budget, coop replay
 * --policy, coop bench --live): one splitter, so every command refuses the
 * same malformed lists with the same message. */
#ifndef COOP_CLI_LIST_H
#define COOP_CLI_LIST_H

/* Splits s in place at its commas into items[0 .. n-1] and returns n. An
 * empty value, an empty item (a leading, trailing or doubled comma) or more
 * than max items prints "PROG: OPTION: ..." with the value and the item's
 * position to stderr and returns -1 (s is then cut up; callers stop). A
 * value over 80 bytes is quoted by its first 80 and its count of items. */
int cli_split_list(char *s, char **items, int max, const char *prog, const char *option);

#endif
