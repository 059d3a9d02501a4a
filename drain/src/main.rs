//! `infergate-drain`: the pod's preStop hook (see the library's docs).
//!
//! ```text
//! infergate-drain [--port P] [--seconds N] [--sequences M]
//! infergate-drain install DIR     copy this binary to DIR/infergate-drain
//! ```

use std::process::ExitCode;

use infergate_drain::{Drain, install};

const USAGE: &str = "usage: infergate-drain [--port P] [--seconds N] [--sequences M]\n       \
                     infergate-drain install DIR";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("install") {
        let [_, dir] = args.as_slice() else {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        };
        return match std::env::current_exe().and_then(|me| install(&me, dir.as_ref())) {
            Ok(path) => {
                println!("installed {}", path.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("infergate-drain: cannot install into {dir}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let drain = match parse(&args) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("infergate-drain: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match drain.run() {
        Ok(body) => {
            println!("{body}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("infergate-drain: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse(args: &[String]) -> Result<Drain, String> {
    let mut drain = Drain {
        port: 8003,
        seconds: 5,
        sequences: 0,
    };
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (flag.as_str(), None),
        };
        let value = match inline {
            Some(v) => v,
            None => rest
                .next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))?,
        };
        let number = |v: &str| v.parse::<u64>().map_err(|e| format!("{name}={v}: {e}"));
        match name {
            "--port" => drain.port = value.parse().map_err(|e| format!("{name}={value}: {e}"))?,
            "--seconds" => drain.seconds = number(&value)?,
            "--sequences" => drain.sequences = number(&value)?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(drain)
}
