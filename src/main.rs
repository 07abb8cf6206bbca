use std::process::ExitCode;

use nix::sys::signal::{SigSet, Signal};
use picolet::cli::{self, Command};

fn main() -> ExitCode {
    // Before any thread starts: one malloc arena for all of them.
    picolet::malloc::limit_arenas();
    // Block the exit signals before any thread starts, so every thread inherits the mask and
    // one thread can take them with sigwait.
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    if let Err(e) = set.thread_block() {
        eprintln!("picolet: blocking signals: {e}");
        return ExitCode::FAILURE;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match cli::parse(&args) {
        Ok(Command::Help) => {
            print!("{}", cli::usage());
            return ExitCode::SUCCESS;
        }
        Ok(Command::LogsHelp) => {
            print!("{}", cli::logs::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(Command::Logs(a)) => {
            // Ctrl-C ends a follow: the exit signals act as usual here.
            let _ = set.thread_unblock();
            return match cli::logs::run(&a, &mut std::io::stdout().lock()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("picolet logs: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Ok(Command::ExecHelp) => {
            print!("{}", cli::exec::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(Command::Exec(a)) => {
            let _ = set.thread_unblock();
            return match cli::exec::run(&a) {
                Ok(code) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
                Err(e) => {
                    eprintln!("picolet exec: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Ok(Command::Version) => {
            println!("picolet {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        #[cfg(not(feature = "file-source"))]
        Ok(Command::Validate(_)) => {
            eprintln!("picolet: validate needs the file source (cargo feature file-source)");
            return ExitCode::from(2);
        }
        #[cfg(feature = "file-source")]
        Ok(Command::Validate(files)) => {
            // Unknown fields are warnings: they go to stderr, the errors to stdout.
            picolet::logger::init(0);
            let errors = cli::validate(&files);
            for e in &errors {
                println!("{e}");
            }
            return if errors.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Ok(Command::Check(o)) => {
            let findings = cli::check::all(&o);
            for f in &findings {
                println!("{f}");
            }
            let fatal = findings.iter().any(|f| f.level == cli::check::Level::Fatal);
            return if fatal {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
        Ok(Command::Run(o)) => *o,
        Err(e) => {
            eprintln!("picolet: {e}");
            return ExitCode::from(2);
        }
    };
    picolet::logger::init(opts.verbosity);
    let (tx, rx) = async_channel::bounded(1);
    std::thread::spawn(move || {
        while let Ok(sig) = set.wait() {
            if tx.send_blocking(sig as i32).is_err() {
                break;
            }
        }
    });
    match picolet::run(opts, rx) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
