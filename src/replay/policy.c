/* The registry of placement policies, in the order replay reports them. */
#include <string.h>

#include "replay/policy.h"

static const replay_policy_ops *const all_policies[] = {
    &replay_policy_coop,     &replay_policy_coop_segments,
    &replay_policy_torch,    &replay_policy_torch_expandable,
    &replay_policy_jemalloc, &replay_policy_ideal,
};

const replay_policy_ops *const *replay_policy_all(size_t *count)
{
    *count = sizeof all_policies / sizeof all_policies[0];
    return all_policies;
}

const replay_policy_ops *replay_policy_find(const char *name)
{
    for (size_t i = 0; i < sizeof all_policies / sizeof all_policies[0]; i++)
        if (!strcmp(all_policies[i]->name, name))
            return all_policies[i];
    return NULL;
}
