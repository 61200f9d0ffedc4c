// Library version.
#include "vllmc.h"

VLLMC_API const char *vllmc_version(void)
{
    return "0.1.0";
}
