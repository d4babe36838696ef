fn main() {
    println!("kernels: CLI under construction");
}
