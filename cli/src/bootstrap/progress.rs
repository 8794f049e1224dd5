//! What a run shows while it works: on a terminal, one live line per host (indicatif) with the phase it is
//! in and for how long, finished lines printed above them; otherwise (pipes, CI, `--output json`) plain
//! lines only, so logs stay greppable.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

pub struct Progress {
    live: Option<MultiProgress>,
    bars: Mutex<BTreeMap<String, ProgressBar>>,
    /// Prints nothing (`kiln apply`'s look at every host through a dry run of init's phases).
    quiet: bool,
}

impl Progress {
    /// Live lines only on a terminal and for text output; `KILN_PROGRESS=plain` turns them off.
    pub fn new(json: bool) -> Progress {
        let plain = std::env::var("KILN_PROGRESS").is_ok_and(|v| v == "plain");
        let live = (!json && !plain && std::io::stdout().is_terminal()).then(MultiProgress::new);
        Progress {
            live,
            bars: Mutex::new(BTreeMap::new()),
            quiet: false,
        }
    }

    /// Shows nothing at all.
    pub fn quiet() -> Progress {
        Progress {
            live: None,
            bars: Mutex::new(BTreeMap::new()),
            quiet: true,
        }
    }

    /// `host` is now running `phase`.
    pub fn started(&self, phase: &str, host: &str) {
        let Some(mp) = &self.live else {
            return;
        };
        let mut bars = self.bars.lock().expect("progress bars");
        let bar = bars.entry(host.to_string()).or_insert_with(|| {
            let b = mp.add(ProgressBar::new_spinner());
            b.set_style(
                ProgressStyle::with_template("[{prefix:>8}] {spinner} {msg:<20} {elapsed:>4}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b.set_prefix(host.to_string());
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        bar.reset_elapsed();
        bar.set_message(phase.to_string());
    }

    /// A finished line, above the live ones when there are any.
    pub fn line(&self, text: &str) {
        if self.quiet {
            return;
        }
        match &self.live {
            Some(mp) => {
                let _ = mp.println(text);
            }
            None => println!("{text}"),
        }
    }

    /// The run is over: live lines go away, finished lines stay.
    pub fn finish(&self) {
        for (_, b) in std::mem::take(&mut *self.bars.lock().expect("progress bars")) {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
