//! Merging several inputs into one stream: the decisions only, no I/O, so they are tested
//! directly.
//!
//! - Chunks pass through as they come.
//! - The output watermark is the minimum over the inputs still open, emitted when it rises.
//! - Barrier alignment (exactly-once): once barrier `n` arrives on an input, that input is
//!   blocked (the caller stops reading it) until barrier `n` has arrived on every open input;
//!   then one barrier `n` goes out and all inputs are unblocked.
//! - `End` goes out once every input has ended.
//! - An input that reported `Idle` does not hold the watermark back until it sends a chunk or
//!   a watermark again; when every open input is idle, the output is idle too.

use weir_core::{Barrier, Message, Watermark};

#[derive(Debug)]
pub struct InputMerger {
    watermarks: Vec<Watermark>,
    ended: Vec<bool>,
    idle: Vec<bool>,
    output_idle: bool,
    blocked: Vec<bool>,
    pending_barrier: Option<Barrier>,
    emitted: Watermark,
    /// Exactly-once: block inputs that delivered the pending barrier.
    align: bool,
}

impl InputMerger {
    pub fn new(inputs: usize) -> Self {
        Self {
            watermarks: vec![Watermark::MIN; inputs],
            ended: vec![false; inputs],
            idle: vec![false; inputs],
            output_idle: false,
            blocked: vec![false; inputs],
            pending_barrier: None,
            emitted: Watermark::MIN,
            align: true,
        }
    }

    /// `false` (at-least-once): inputs are never blocked; the barrier still goes out once it
    /// has arrived on every open input, but rows after it on the fast inputs come first.
    pub fn aligned(mut self, align: bool) -> Self {
        self.align = align;
        self
    }

    /// Whether the caller may read input `i` now.
    pub fn readable(&self, i: usize) -> bool {
        !self.ended[i] && (!self.blocked[i] || !self.align)
    }

    pub fn all_ended(&self) -> bool {
        self.ended.iter().all(|e| *e)
    }

    /// Take message `msg` from input `i`; push what goes downstream into `out`.
    pub fn on_message(&mut self, i: usize, msg: Message, out: &mut Vec<Message>) {
        match msg {
            Message::Chunk(_) => {
                self.activate(i);
                out.push(msg)
            }
            Message::Watermark(w) => {
                self.activate(i);
                if w > self.watermarks[i] {
                    self.watermarks[i] = w;
                }
                self.emit_watermark(out);
            }
            Message::Idle => {
                self.idle[i] = true;
                self.emit_watermark(out);
                self.emit_idle(out);
            }
            Message::Barrier(b) => {
                self.blocked[i] = true;
                self.pending_barrier = Some(b);
                self.release_barrier(out);
            }
            Message::End => {
                self.ended[i] = true;
                self.blocked[i] = false;
                self.emit_watermark(out);
                self.release_barrier(out);
                if self.all_ended() {
                    out.push(Message::End);
                }
            }
        }
    }

    fn activate(&mut self, i: usize) {
        self.idle[i] = false;
        self.output_idle = false;
    }

    fn emit_idle(&mut self, out: &mut Vec<Message>) {
        let open_idle = (0..self.idle.len()).filter(|&i| !self.ended[i]).all(|i| self.idle[i]);
        if open_idle && !self.output_idle && !self.all_ended() {
            self.output_idle = true;
            out.push(Message::Idle);
        }
    }

    fn emit_watermark(&mut self, out: &mut Vec<Message>) {
        let open = (0..self.watermarks.len()).filter(|&i| !self.ended[i] && !self.idle[i]).map(|i| self.watermarks[i]);
        let Some(min) = open.min() else { return };
        if min > self.emitted {
            self.emitted = min;
            out.push(Message::Watermark(min));
        }
    }

    fn release_barrier(&mut self, out: &mut Vec<Message>) {
        let Some(barrier) = self.pending_barrier else { return };
        let aligned = self.blocked.iter().zip(&self.ended).all(|(b, e)| *b || *e);
        if aligned {
            self.pending_barrier = None;
            self.blocked.iter_mut().for_each(|b| *b = false);
            out.push(Message::Barrier(barrier));
        }
    }
}

#[cfg(test)]
mod tests {
    use weir_core::BarrierKind;

    use super::*;

    fn kinds(out: &[Message]) -> Vec<String> {
        out.iter()
            .map(|m| match m {
                Message::Chunk(_) => "chunk".to_string(),
                Message::Watermark(w) => format!("wm {}", w.0),
                Message::Barrier(b) => format!("barrier {}", b.epoch),
                Message::Idle => "idle".to_string(),
                Message::End => "end".to_string(),
            })
            .collect()
    }

    #[test]
    fn watermark_is_min_of_open_inputs() {
        let mut m = InputMerger::new(2);
        let mut out = vec![];
        m.on_message(0, Message::Watermark(Watermark(10)), &mut out);
        assert!(out.is_empty(), "input 1 has no watermark yet");
        m.on_message(1, Message::Watermark(Watermark(5)), &mut out);
        m.on_message(1, Message::Watermark(Watermark(20)), &mut out);
        m.on_message(1, Message::End, &mut out);
        assert_eq!(kinds(&out), ["wm 5", "wm 10"]);
        m.on_message(0, Message::Watermark(Watermark(15)), &mut out);
        m.on_message(0, Message::End, &mut out);
        assert_eq!(kinds(&out), ["wm 5", "wm 10", "wm 15", "end"]);
    }

    #[test]
    fn barrier_waits_for_every_open_input() {
        let mut m = InputMerger::new(3);
        let mut out = vec![];
        let b = Barrier { epoch: 7, kind: BarrierKind::Checkpoint };
        m.on_message(0, Message::Barrier(b), &mut out);
        assert!(!m.readable(0) && m.readable(1));
        m.on_message(2, Message::End, &mut out);
        assert!(out.is_empty());
        m.on_message(1, Message::Barrier(b), &mut out);
        assert_eq!(kinds(&out), ["barrier 7"]);
        assert!(m.readable(0) && m.readable(1) && !m.readable(2));
    }

    #[test]
    fn idle_input_stops_holding_the_watermark_back() {
        let mut m = InputMerger::new(2);
        let mut out = vec![];
        m.on_message(0, Message::Watermark(Watermark(10)), &mut out);
        m.on_message(1, Message::Watermark(Watermark(3)), &mut out);
        m.on_message(0, Message::Watermark(Watermark(20)), &mut out);
        assert_eq!(kinds(&out), ["wm 3"], "input 1 holds the watermark at 3");
        m.on_message(1, Message::Idle, &mut out);
        assert_eq!(kinds(&out), ["wm 3", "wm 20"]);
        // Back from idle behind the output watermark: no regression, held until it catches up.
        m.on_message(1, Message::Watermark(Watermark(5)), &mut out);
        m.on_message(0, Message::Watermark(Watermark(30)), &mut out);
        assert_eq!(kinds(&out), ["wm 3", "wm 20"]);
        m.on_message(1, Message::Watermark(Watermark(25)), &mut out);
        assert_eq!(kinds(&out), ["wm 3", "wm 20", "wm 25"]);
        m.on_message(0, Message::Idle, &mut out);
        m.on_message(1, Message::Idle, &mut out);
        assert_eq!(kinds(&out), ["wm 3", "wm 20", "wm 25", "idle"]);
    }

    #[test]
    fn input_ending_releases_a_waiting_barrier() {
        let mut m = InputMerger::new(2);
        let mut out = vec![];
        let b = Barrier { epoch: 1, kind: BarrierKind::Checkpoint };
        m.on_message(0, Message::Barrier(b), &mut out);
        m.on_message(1, Message::End, &mut out);
        assert_eq!(kinds(&out), ["barrier 1"]);
    }
}
