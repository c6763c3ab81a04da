// Symbols of the shared library (libcachet) that users link against: everything else stays hidden.
#pragma once

#define CACHET_API __attribute__((visibility("default")))
