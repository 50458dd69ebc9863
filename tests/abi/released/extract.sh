#!/usr/bin/env bash
# Regenerates the public headers of every released gpumem from git history, as a program built
# against that release saw them: tests/abi/released/<major.minor>/include/gpumem/, with the
# gpumem_version.h that release's CMake would have generated. test_released compiles against
# them. Run from anywhere in the repository; a new release adds a line to `releases`.
set -euo pipefail

# version and the last commit of that release.
releases=(
  "0.1 2981c23118223209b6caf2854a9e26aee70f85e0"
  "0.2 4c00b55659b023e0a455056788839bd87649d1d3"
  "0.3 0994c8da40fae34c31adbe80a0e21a60bdea1b80"
)

root=$(git rev-parse --show-toplevel)
cd "$root"
for release in "${releases[@]}"; do
  read -r version commit <<<"$release"
  project_version=$(git show "$commit:CMakeLists.txt" | sed -n 's/^project(gpumem VERSION \([0-9.]*\) .*/\1/p')
  if [[ $project_version != "$version".* ]]; then
    echo "extract.sh: $commit is gpumem $project_version, not $version" >&2
    exit 1
  fi
  IFS=. read -r major minor patch <<<"$project_version"
  dir=tests/abi/released/$version/include/gpumem
  rm -rf "$dir"
  mkdir -p "$dir"
  git ls-tree --name-only "$commit" include/gpumem/ | while read -r path; do
    if [[ $path == *.h ]]; then git show "$commit:$path" >"$dir/${path##*/}"; fi
  done
  git show "$commit:include/gpumem/gpumem_version.h.in" |
    sed -e "s/@PROJECT_VERSION_MAJOR@/$major/" -e "s/@PROJECT_VERSION_MINOR@/$minor/" \
        -e "s/@PROJECT_VERSION_PATCH@/$patch/" -e "s/@PROJECT_VERSION@/$project_version/" >"$dir/gpumem_version.h"
  git show "$commit:lib/gpumem.map" >"tests/abi/released/$version/gpumem.map"  # the ABI check's baseline
  echo "$dir: gpumem $project_version from $commit"
done
