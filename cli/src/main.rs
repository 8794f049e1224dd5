fn main() {
    std::process::exit(kiln::commands::main());
}
