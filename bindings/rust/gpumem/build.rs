//! Puts the directory gpumem-sys linked libgpumem from (`GPUMEM_LIB_DIR`, resolved) on the run
//! path of this crate's tests and examples: cargo passes a dependency's link arguments to no one.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_GPUMEM_LIB_DIR");
    if let Some(dir) = std::env::var_os("DEP_GPUMEM_LIB_DIR") {
        println!(
            "cargo:rustc-link-arg=-Wl,-rpath,{}",
            std::path::Path::new(&dir).display()
        );
    }
}
