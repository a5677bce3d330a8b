//! The `process_*` metrics: the prometheus crate's process collector, with
//! its CPU counter replaced by one with sub-second precision.
//!
//! Why: the crate (0.14, `process_collector.rs`) keeps
//! `process_cpu_seconds_total` in an integer counter and divides the clock
//! ticks by the tick rate in integers, so the counter moves in whole
//! seconds, and a `rate()` over a short window is a step function. Every
//! other Prometheus exporter reports it as a float (the Go client:
//! `(utime + stime) / CLK_TCK`). The rest of the collector (memory, file
//! descriptors, threads, start time) is kept as it is.

use std::sync::{LazyLock, Mutex};

use prometheus::core::{Collector, Desc};
use prometheus::process_collector::ProcessCollector;
use prometheus::{proto, Counter, Opts};

/// The metric the crate truncates.
const CPU: &str = "process_cpu_seconds_total";

/// The crate's process collector less its CPU counter, plus ours.
pub struct ProcessMetrics {
    inner: ProcessCollector,
    cpu: Counter,
    /// Scrapes on two threads would both add the same ticks.
    updating: Mutex<()>,
    descs: Vec<Desc>,
}

impl ProcessMetrics {
    pub fn for_self() -> ProcessMetrics {
        let inner = ProcessCollector::for_self();
        // Same name, type (counter) and help as every exporter gives it.
        let cpu = Counter::with_opts(Opts::new(
            CPU,
            "Total user and system CPU time spent in seconds.",
        ))
        .expect("a valid metric name");
        let descs = inner
            .desc()
            .into_iter()
            .filter(|d| d.fq_name != CPU)
            .chain(cpu.desc())
            .cloned()
            .collect();
        ProcessMetrics {
            inner,
            cpu,
            updating: Mutex::new(()),
            descs,
        }
    }
}

impl Collector for ProcessMetrics {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<proto::MetricFamily> {
        let mut families: Vec<proto::MetricFamily> = self
            .inner
            .collect()
            .into_iter()
            .filter(|f| f.name() != CPU)
            .collect();
        if let Some(seconds) = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|stat| cpu_seconds(&stat, clock_ticks()))
        {
            let _one = self.updating.lock().unwrap_or_else(|p| p.into_inner());
            // A counter only goes up: add what was spent since the last
            // scrape.
            let past = self.cpu.get();
            if seconds > past {
                self.cpu.inc_by(seconds - past);
            }
        }
        families.extend(self.cpu.collect());
        families
    }
}

/// The kernel's clock ticks a second (`getconf CLK_TCK`), which
/// `/proc/<pid>/stat` counts CPU time in: the `AT_CLKTCK` entry the kernel
/// hands every process in its auxiliary vector (what glibc's `sysconf`
/// reads too), read once; read from `/proc` so that no `unsafe` call is
/// needed. 100, the value on every common Linux build, if it cannot be read.
fn clock_ticks() -> f64 {
    static TICKS: LazyLock<f64> = LazyLock::new(|| {
        std::fs::read("/proc/self/auxv")
            .ok()
            .and_then(|auxv| at_clktck(&auxv))
            .filter(|&ticks| ticks > 0)
            .map_or(100.0, |ticks| ticks as f64)
    });
    *TICKS
}

/// The auxiliary vector's key for the clock tick rate.
const AT_CLKTCK: usize = 17;

/// `AT_CLKTCK` from an auxiliary vector: pairs of native words (key,
/// value), ended by a zero key.
fn at_clktck(auxv: &[u8]) -> Option<usize> {
    const WORD: usize = std::mem::size_of::<usize>();
    let word = |bytes: &[u8]| usize::from_ne_bytes(bytes.try_into().unwrap_or([0; WORD]));
    auxv.chunks_exact(2 * WORD)
        .map(|pair| (word(&pair[..WORD]), word(&pair[WORD..])))
        .take_while(|&(key, _)| key != 0)
        .find(|&(key, _)| key == AT_CLKTCK)
        .map(|(_, value)| value)
}

/// User plus system CPU seconds from a `/proc/<pid>/stat` line: fields 14
/// and 15 (`utime`, `stime`), counted after the command name, which is in
/// parentheses and may itself hold spaces or parentheses.
fn cpu_seconds(stat: &str, ticks_per_second: f64) -> Option<f64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Fields from the third (state) on: utime and stime are 14 and 15.
    let mut fields = after_name.split_ascii_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / ticks_per_second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_keeps_its_fraction_of_a_second() {
        let stat = "4242 (wait gate) S 1 4242 4242 0 -1 4194560 1200 0 0 0 1234 300 0 0 20 0 3 0 100 1000 200";
        assert_eq!(cpu_seconds(stat, 100.0), Some(15.34));
        assert_eq!(cpu_seconds("garbage", 100.0), None);
    }

    #[test]
    fn the_clock_tick_is_read_from_the_auxiliary_vector() {
        let word = |n: usize| n.to_ne_bytes();
        let auxv: Vec<u8> = [6, 4096, AT_CLKTCK, 250, 0, 0]
            .into_iter()
            .flat_map(word)
            .collect();
        assert_eq!(at_clktck(&auxv), Some(250));
        assert_eq!(at_clktck(&auxv[..2 * std::mem::size_of::<usize>()]), None);
        // This process's, as the kernel gives it.
        assert!(clock_ticks() >= 1.0);
    }

    #[test]
    fn the_counter_is_a_float_under_the_usual_name() {
        let metrics = ProcessMetrics::for_self();
        let families = metrics.collect();
        let cpu: Vec<_> = families.iter().filter(|f| f.name() == CPU).collect();
        assert_eq!(cpu.len(), 1, "exported once");
        assert_eq!(cpu[0].get_field_type(), proto::MetricType::COUNTER);
        assert!(families.iter().any(|f| f.name() == "process_open_fds"));
        assert_eq!(metrics.desc().len(), families.len());
    }
}
