/* Reading a caller's versioned options struct (cz_format.h): every version from 1 to the
 * library's own is accepted, as libgit2 accepts its options structs, so that a program built
 * against an older header keeps running with a newer library. */
#include "cz_format.h"

#include <stdio.h>
#include <string.h>

int cz__options_version_check(int version, int current, const char *type, const char *how,
                              cz_error *err)
{
    char dflt[160];
    if (!how) {
        snprintf(dflt, sizeof dflt, "%s_init() or its _INIT macro", type);
        how = dflt;
    }
    if (version >= 1 && version <= current)
        return CZ_OK;
    if (version < 1)
        return cz__error_set(
            err, CZ_EUNSUPPORTED,
            "%s version %d: not initialized (this library takes versions 1 to %d); "
            "initialize it with %s_init() or its _INIT macro",
            type, version, current, type);
    return cz__error_set(err, CZ_EUNSUPPORTED,
                         "%s version %d is newer than this library's version %d (the program was "
                         "built against a newer canzona header); run it with that header's "
                         "library, or rebuild it against this one (initializing the struct with "
                         "%s)",
                         type, version, current, how);
}

int cz__options_read(void *dst, const void *src, const size_t *ends, int current, const char *type,
                     cz_error *err)
{
    int version;
    /* The version is the first member of every options struct; read as bytes, so that a
     * struct of any version is read no further than its own fields. */
    memcpy(&version, src, sizeof version);
    int rc = cz__options_version_check(version, current, type, NULL, err);
    if (rc != CZ_OK)
        return rc;
    /* The fields version has lie where they lie in this build's struct (each version only
     * appended to the one before); the rest keep the defaults dst holds. */
    memcpy(dst, src, ends[version - 1]);
    memcpy(dst, &current, sizeof current);
    return CZ_OK;
}
