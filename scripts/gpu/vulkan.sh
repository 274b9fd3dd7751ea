#!/usr/bin/env bash
# Vulkan headers new enough for llama.cpp's Vulkan backend, where the system's are not.
#
#   scripts/gpu/vulkan.sh    prints VULKAN_SDK=DIR when the headers had to come from
#                                elsewhere, nothing when the system's will do
#
# Why: ggml-vulkan.cpp uses VK_EXT_layer_settings (Vulkan headers 1.3.272 and later); Debian 12
# ships 1.3.239, and the build fails on `vk::LayerSettingEXT`. The next Debian release's
# libvulkan-dev (headers only are used: C, C++ and the registry) is fetched with apt-get from
# the mirror this system's apt already uses, unpacked into ~/.cache/rag/vulkan-sdk (XDG_CACHE_HOME) (nothing
# is installed system-wide), and laid out as a Vulkan SDK: include/, lib/libvulkan.so (the
# system's loader) and bin/glslc (the system's compiler). llama-cpp-sys-2 and CMake's
# FindVulkan read VULKAN_SDK. VULKAN_HEADERS_SUITE picks another Debian suite.
set -euo pipefail

say() { printf 'vulkan: %s\n' "$*" >&2; }
die() { printf 'vulkan: error: %s\n' "$*" >&2; exit 1; }

need=VK_EXT_layer_settings
if grep -qs "$need" /usr/include/vulkan/vulkan_core.h; then
  say "the system's Vulkan headers have $need"
  exit 0
fi
sdk=${XDG_CACHE_HOME:-$HOME/.cache}/rag/vulkan-sdk
if grep -qs "$need" "$sdk/include/vulkan/vulkan_core.h"; then
  echo "VULKAN_SDK=$sdk"
  exit 0
fi

suite=${VULKAN_HEADERS_SUITE:-trixie}
# The Debian mirror this machine's apt uses, so a proxy or mirror set there applies here too.
mirror=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
  /etc/apt/sources.list.d/*.sources | grep -v security | grep -oE 'https?://[^ ]+/debian/?' | head -1 || true)
[ -n "$mirror" ] || die "no Debian mirror in /etc/apt/sources.list*: install Vulkan headers 1.3.272 or later and set VULKAN_SDK to their prefix"
loader=$(ls /usr/lib/*/libvulkan.so.1 /usr/lib/libvulkan.so.1 2>/dev/null | head -1 || true)
[ -n "$loader" ] || die "no Vulkan loader (libvulkan.so.1): run scripts/setup.sh --gpu=vulkan as root, or install libvulkan1"
glslc=$(command -v glslc) || die "no glslc: run scripts/setup.sh --gpu=vulkan as root, or install glslc"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" >"$work/sources.list"
apt=(apt-get -qq -o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o Debug::NoLocking=1
  -o APT::Sandbox::User="$(id -un)")
say "fetching libvulkan-dev from Debian $suite ($mirror) for its headers"
"${apt[@]}" update || die "apt-get could not read Debian $suite from $mirror; set VULKAN_HEADERS_SUITE or VULKAN_SDK"
(cd "$work" && "${apt[@]}" download libvulkan-dev) || die "apt-get could not fetch libvulkan-dev from Debian $suite"
dpkg-deb -x "$work"/libvulkan-dev_*.deb "$work/root"
grep -qs "$need" "$work/root/usr/include/vulkan/vulkan_core.h" ||
  die "Debian $suite's libvulkan-dev lacks $need too; set VULKAN_HEADERS_SUITE to a newer suite"

rm -rf "$sdk.new"
mkdir -p "$sdk.new/lib" "$sdk.new/bin"
cp -a "$work/root/usr/include" "$sdk.new/include"
ln -s "$loader" "$sdk.new/lib/libvulkan.so"
ln -s "$glslc" "$sdk.new/bin/glslc"
rm -rf "$sdk"
mv "$sdk.new" "$sdk"
say "Vulkan headers $(grep -m1 -oE 'VK_HEADER_VERSION [0-9]+' "$sdk/include/vulkan/vulkan_core.h") in $sdk"
echo "VULKAN_SDK=$sdk"
