//! Links libgpumem: from `GPUMEM_LIB_DIR` when it is set (a build tree or an install prefix's
//! `lib`), else from wherever the linker's own search finds `libgpumem.so`.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=GPUMEM_LIB_DIR");
    if let Some(dir) = env::var_os("GPUMEM_LIB_DIR") {
        if !dir.is_empty() {
            println!(
                "cargo:rustc-link-search=native={}",
                std::path::Path::new(&dir).display()
            );
        }
    }
    println!("cargo:rustc-link-lib=dylib=gpumem");
}
