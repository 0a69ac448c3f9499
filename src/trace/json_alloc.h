/*
 * Telling jansson's failed allocations from bad input.
 *
 * jansson reports an allocation that fails while it parses as a syntax error
 * ("invalid token near ...", "string or '}' expected"), and one inside its
 * lexer's text buffer not at all (the token is cut short: a number may parse
 * with digits missing). A reader cannot tell either from the result, so it
 * counts them: json_alloc_watch routes jansson's allocations through a
 * wrapper that counts the ones that fail (installed once per process,
 * forwarding to the functions installed before it, a test's counting ones
 * included), and json_alloc_failures compared before and after a parse says
 * whether host memory ran out during it.
 */
#ifndef COOP_TRACE_JSON_ALLOC_H
#define COOP_TRACE_JSON_ALLOC_H

/* Installs the counting wrapper (once; later calls do nothing). Call before
 * parsing. */
void json_alloc_watch(void);

/* jansson allocations that failed in the calling thread so far. */
unsigned long json_alloc_failures(void);

#endif
