//! Links libgpumem: from `GPUMEM_LIB_DIR` when it is set (a build tree's or an install prefix's
//! `lib`), else from wherever the linker's own search finds `libgpumem.so`.
//!
//! A relative `GPUMEM_LIB_DIR` is taken from the directory cargo was run in (the shell's `PWD`),
//! else from the repository root, whichever holds `libgpumem.so`: cargo runs this script in
//! `gpumem-sys/`, where `build/release/lib` would name nothing. The directory also goes on the run
//! path of this package's tests, and to dependents as `DEP_GPUMEM_LIB_DIR` (the `gpumem` crate
//! puts it on the run path of its own), so that they find `libgpumem.so.0` without
//! `LD_LIBRARY_PATH`.

use std::env;
use std::path::{Path, PathBuf};

const LINK_NAME: &str = "libgpumem.so";

fn lib_dir(given: &Path) -> PathBuf {
    let candidates: Vec<PathBuf> = if given.is_absolute() {
        vec![given.to_path_buf()]
    } else {
        let mut c = Vec::new();
        println!("cargo:rerun-if-env-changed=PWD");
        if let Some(pwd) = env::var_os("PWD").map(PathBuf::from).filter(|p| p.is_absolute()) {
            c.push(pwd.join(given));
        }
        // gpumem-sys lives in bindings/rust/gpumem-sys.
        let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
        if let Some(root) = manifest.ancestors().nth(3) {
            c.push(root.join(given));
        }
        c
    };
    for dir in &candidates {
        if dir.join(LINK_NAME).exists() {
            return dir.canonicalize().unwrap_or_else(|_| dir.clone());
        }
    }
    let looked: Vec<String> = candidates.iter().map(|d| d.display().to_string()).collect();
    panic!(
        "GPUMEM_LIB_DIR={}: no {} in {}; build the library first (cmake --build build/release) or name \
         the directory that holds it",
        given.display(),
        LINK_NAME,
        looked.join(" nor in ")
    );
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=GPUMEM_LIB_DIR");
    if let Some(given) = env::var_os("GPUMEM_LIB_DIR").filter(|d| !d.is_empty()) {
        let dir = lib_dir(Path::new(&given));
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
        println!("cargo:lib_dir={}", dir.display());
    }
    println!("cargo:rustc-link-lib=dylib=gpumem");
}
