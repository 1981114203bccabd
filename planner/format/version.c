/* cz_version (canzona.h): the version this library was built as, from canzona_version.h. In the
 * format library so that both shared libraries carry and export it. */
#include "cz_format.h"

const char *cz_version(int *major, int *minor, int *patch)
{
    if (major)
        *major = CZ_VERSION_MAJOR;
    if (minor)
        *minor = CZ_VERSION_MINOR;
    if (patch)
        *patch = CZ_VERSION_PATCH;
    return CZ_VERSION;
}
