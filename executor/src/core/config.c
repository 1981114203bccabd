/* Executor configuration defaults. */
#include "canzona_exec.h"

#include <string.h>

/* The defaults are CZ_EXEC_CONFIG_INIT (canzona_exec.h): one set of values, each optimizer's
 * and backend's among them, written once in the public header. Copied from a static object,
 * whose padding is zero, so that two initialized configs compare equal byte for byte. */
void cz_exec_config_init(cz_exec_config *cfg)
{
    static const cz_exec_config defaults = CZ_EXEC_CONFIG_INIT;
    memcpy(cfg, &defaults, sizeof *cfg);
}
