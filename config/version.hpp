#pragma once
// The k3serve version (CMake's project VERSION): `k3 --version`, `k3 version`, GET /version.

namespace k3 {
inline constexpr const char* version_string = K3_VERSION_STRING;
} // namespace k3
