/* The executor's configuration as the caller hands it in (config.c): every version of
 * cz_exec_config read once, at create, into this build's layout. */
#ifndef CZ_EXEC_CONFIG_H
#define CZ_EXEC_CONFIG_H

#include "canzona_exec.h"

/* Reads the caller's config of any version from 1 to CZ_EXEC_CONFIG_VERSION into *out, in this
 * version's layout: versions 1 to 6 (the flat struct) from their own layout, converted, with the
 * defaults for the fields a version lacks, and each optimizer's struct checked by its version.
 * NULL in = the defaults. On CZ_EUNSUPPORTED (a version below 1 or above the library's, naming
 * both) *out still holds what every version has in the same place (the backend, comm, ranks and
 * communicators, over the defaults), so that create opens the communication the caller asked
 * for and every rank learns of the failure. */
int cz__exec_config_read(cz_exec_config *out, const cz_exec_config *in, cz_error *err);

#endif
