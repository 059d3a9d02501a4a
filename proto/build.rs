//! Compiles the `.proto` contracts with a pure-Rust protobuf compiler (no system `protoc`).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = PathBuf::from("proto");
    let files = ["grpc_service.proto", "health.proto"];
    for file in files.iter().chain(["model_config.proto"].iter()) {
        println!("cargo:rerun-if-changed=proto/{file}");
    }
    let fds = protox::compile(files, [&proto_dir])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    // Kept for reflection: the JSON and text forms of `ModelConfig` are driven by it.
    std::fs::write(
        out_dir.join("descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        // Tensor payloads stay reference-counted slices of the request buffer.
        .bytes(".")
        .compile_fds(fds)?;
    Ok(())
}
