//! The fairness answer (`GET /api/v1/queue/fairness`): what anyone may
//! know of a queue's draw and of the order admission keeps, made from an
//! instance's last look at the queue's control HASH and gate record (once
//! a second), so that it costs no Redis call.

use serde::Serialize;

use super::draw::ALGORITHM;

/// The algorithm of a pre-queue placed in arrival order after all.
pub const ARRIVAL_ORDER: &str = "arrival order";

/// A queue's fairness figures, as the endpoint serves them.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    pub queue: String,
    /// The hex SHA-256 of the scheduled shuffled pre-queue's seed,
    /// published from the schedule on; `null` without one.
    pub commitment: Option<String>,
    /// When its seed was drawn (RFC 3339).
    pub committed_at: Option<String>,
    /// The draw's seed, once the open has come (by Redis's clock).
    pub seed: Option<String>,
    pub algorithm: &'static str,
    /// Users the draw placed, from the open on (counted as it places).
    pub prequeued: Option<u64>,
    pub open_at: Option<String>,
    pub admitted_out_of_order: u64,
    /// The arrival of the last user admitted, µs since the epoch (a placed
    /// pre-queue user's pre-queue arrival).
    pub last_admitted_arrival: Option<u64>,
    /// The last draw that opened, kept after a new event was scheduled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<PreviousDraw>,
}

/// A past draw: what it committed to, its seed, and its open.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PreviousDraw {
    pub commitment: String,
    pub seed: String,
    pub open_at: String,
}

fn field<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(f, _)| f == name)
        .map(|(_, v)| v.as_str())
}

fn number(pairs: &[(String, String)], name: &str) -> Option<u64> {
    field(pairs, name).and_then(|v| v.parse().ok())
}

impl Figures {
    /// From a look at the control HASH and the gate record, made at
    /// `now_ms` by Redis's clock: a draw's seed is shown only from `open_at` on,
    /// or once the placing has begun (an operator's early open).
    pub fn from_look(
        queue: &str,
        control: &[(String, String)],
        admission: &[(String, String)],
        now_ms: u64,
    ) -> Figures {
        let open_at = number(control, "open_at");
        let opened = open_at.is_some_and(|at| now_ms >= at) || field(control, "base").is_some();
        let commitment = field(control, "commitment").map(str::to_string);
        let previous = match (
            field(control, "previous_commitment"),
            field(control, "previous_seed"),
            number(control, "previous_open_at"),
        ) {
            (Some(commitment), Some(seed), Some(at)) => Some(PreviousDraw {
                commitment: commitment.to_string(),
                seed: seed.to_string(),
                open_at: crate::time::rfc3339(at),
            }),
            _ => None,
        };
        Figures {
            queue: queue.to_string(),
            seed: commitment
                .as_ref()
                .and(opened.then(|| field(control, "seed")).flatten())
                .map(str::to_string),
            commitment,
            committed_at: number(control, "committed_at").map(crate::time::rfc3339),
            // A placing that would have taken scores past 2^53 keeps the
            // arrival order, and says so (`shuffle` 0).
            algorithm: if opened && field(control, "shuffle") == Some("0") {
                ARRIVAL_ORDER
            } else {
                ALGORITHM
            },
            // The users the placing drew (the pre-queue may also hold
            // users an earlier event placed who still wait: not drawn).
            prequeued: number(control, "placed_count").filter(|_| opened),
            open_at: open_at.map(crate::time::rfc3339),
            admitted_out_of_order: number(admission, "out_of_order").unwrap_or(0),
            last_admitted_arrival: number(admission, "last_arrival"),
            previous,
        }
    }

    /// The commitment to sign into the receipt of a user pre-queued when
    /// the draw committed at `committed_at_ms` was in force; `None` when
    /// this look knows another (a schedule made since it).
    pub fn commitment_of(control: &[(String, String)], committed_at_ms: u64) -> Option<String> {
        (committed_at_ms > 0 && number(control, "committed_at") == Some(committed_at_ms))
            .then(|| field(control, "commitment").map(str::to_string))
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn the_seed_is_shown_from_the_open_on_and_never_before() {
        let control = pairs(&[
            ("open_at", "2000"),
            ("shuffle", "1"),
            ("seed", "ab"),
            ("commitment", "cd"),
            ("committed_at", "1000"),
            ("prequeued", "52"),
            ("placed_count", "50"),
        ]);
        let before = Figures::from_look("q", &control, &[], 1999);
        assert_eq!(before.commitment.as_deref(), Some("cd"));
        assert_eq!(before.seed, None);
        assert_eq!(before.prequeued, None);
        let after = Figures::from_look("q", &control, &[], 2000);
        assert_eq!(after.seed.as_deref(), Some("ab"));
        assert_eq!(after.prequeued, Some(50));
        // An early open (the operator's end-event) places at once.
        let mut early = control.clone();
        early.push(("base".into(), "5".into()));
        assert_eq!(
            Figures::from_look("q", &early, &[], 1500).seed.as_deref(),
            Some("ab")
        );
        // A seed drawn at the open by an earlier version, with no
        // commitment, is no draw anyone could check.
        let unchecked = pairs(&[("open_at", "2000"), ("seed", "ab")]);
        assert_eq!(Figures::from_look("q", &unchecked, &[], 3000).seed, None);
        // Placed in arrival order after all: said so.
        let mut fallen_back = control.clone();
        fallen_back.push(("shuffle".into(), "0".into()));
        fallen_back.retain(|(f, v)| f != "shuffle" || v == "0");
        assert_eq!(
            Figures::from_look("q", &fallen_back, &[], 2000).algorithm,
            ARRIVAL_ORDER
        );
        assert_eq!(
            Figures::from_look("q", &control, &[], 2000).algorithm,
            ALGORITHM
        );
    }

    #[test]
    fn a_receipt_takes_the_commitment_of_its_own_draw_only() {
        let control = pairs(&[("commitment", "cd"), ("committed_at", "1000")]);
        assert_eq!(
            Figures::commitment_of(&control, 1000).as_deref(),
            Some("cd")
        );
        assert_eq!(Figures::commitment_of(&control, 999), None);
        assert_eq!(Figures::commitment_of(&control, 0), None);
    }

    #[test]
    fn order_figures_come_from_the_gate_record() {
        let admission = pairs(&[("out_of_order", "2"), ("last_arrival", "123")]);
        let f = Figures::from_look("q", &[], &admission, 0);
        assert_eq!(f.admitted_out_of_order, 2);
        assert_eq!(f.last_admitted_arrival, Some(123));
        assert_eq!(f.commitment, None);
        assert_eq!(f.open_at, None);
    }
}
