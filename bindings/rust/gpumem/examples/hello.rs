//! Prints the version of the libgpumem it loaded and the number of CUDA devices, or why there are
//! none: `cargo run --example hello`.

fn main() {
    println!("gpumem {}", gpumem::version());
    match gpumem::device_count() {
        Ok(count) => println!("{} CUDA devices", count),
        Err(e) => println!("no CUDA devices: {}", e),
    }
}
