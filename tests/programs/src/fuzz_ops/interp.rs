//! The interpreter: one host call per op, handles kept in slots.

use rollbox_sdk::bindings::workflow::rollbox::workflow::episode::EpisodeOutput;
use rollbox_sdk::tensor::{self, Tensor, TensorData};
use rollbox_sdk::tokenizer::{self};
use rollbox_sdk::{ModelRequest, RewardInput, engine, log, rewards, tools};

use crate::reader::*;
use crate::tables::*;

/// The interpreter's state: the program and every handle it made.
pub(crate) struct Interp<'a> {
    cur: Cursor<'a>,
    /// Handles in creation order; `None` once dropped or moved into the output.
    slots: Vec<Option<Tensor>>,
    /// Raw ids of dropped handles.
    stale: Vec<u32>,
    /// Slot indices of the dicts built by VALID, by key.
    valid: Vec<Vec<(String, usize)>>,
}

impl<'a> Interp<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Interp {
            cur: Cursor { bytes, pos: 0 },
            slots: Vec::new(),
            stale: Vec::new(),
            valid: Vec::new(),
        }
    }

    /// The slot of the (b % live)-th live handle; reads one byte even when none is live.
    pub(crate) fn pick(&mut self) -> Option<usize> {
        let b = usize::from(self.cur.u8());
        let live = self.slots.iter().filter(|s| s.is_some()).count();
        if live == 0 {
            return None;
        }
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .nth(b % live)
            .map(|(i, _)| i)
    }

    pub(crate) fn tensor(&self, slot: usize) -> Option<&Tensor> {
        self.slots.get(slot).and_then(Option::as_ref)
    }

    pub(crate) fn keep<E>(&mut self, made: Result<Tensor, E>) {
        if let Ok(t) = made {
            self.slots.push(Some(t));
        }
    }

    pub(crate) fn run(mut self) -> Result<Option<EpisodeOutput>, String> {
        let mut ops = 0;
        while !self.cur.at_end() && ops < MAX_OPS {
            ops += 1;
            match OPS[usize::from(self.cur.u8()) % OPS.len()] {
                Op::Return => return self.finish(),
                op => self.step(op),
            }
        }
        Ok(None)
    }

    pub(crate) fn step(&mut self, op: Op) {
        match op {
            Op::Create => self.create(),
            Op::Concat => self.concat(),
            Op::ConcatPadded => self.concat_padded(),
            Op::Unsqueeze => {
                let slot = self.pick();
                let dim = self.cur.udim();
                if let Some(t) = slot.and_then(|s| self.tensor(s)) {
                    let made = t.unsqueeze(dim);
                    self.keep(made);
                }
            }
            Op::Shape => {
                if let Some(t) = self.pick().and_then(|s| self.tensor(s)) {
                    let _ = t.shape();
                }
            }
            Op::Dtype => {
                if let Some(t) = self.pick().and_then(|s| self.tensor(s)) {
                    let _ = t.dtype();
                }
            }
            Op::Data => {
                if let Some(t) = self.pick().and_then(|s| self.tensor(s)) {
                    let _ = t.data();
                }
            }
            Op::DropOne => {
                if let Some(t) = self.pick().and_then(|s| self.slots[s].take()) {
                    self.stale.push(t.handle());
                    drop(t);
                }
            }
            Op::Stale => {
                let which = usize::from(self.cur.u8());
                let action = self.cur.u8();
                if !self.stale.is_empty() {
                    let id = self.stale[which % self.stale.len()];
                    self.forged(id, action);
                }
            }
            Op::Forge => {
                let id = match self.cur.u8() % 4 {
                    0 => {
                        let slot = self.pick();
                        slot.and_then(|s| self.tensor(s)).map_or(1, Tensor::handle)
                    }
                    1 => u32::from(self.cur.u8()),
                    2 => self.cur.u32(),
                    _ => at(&IDS, self.cur.u8()),
                };
                let id = id.clamp(1, u32::MAX - 1);
                let action = self.cur.u8();
                self.forged(id, action);
            }
            Op::Generate => {
                let request = self.cur.request();
                let _ = engine::generate(&request);
            }
            Op::GenerateMany => {
                let n = self.cur.count();
                let requests: Vec<ModelRequest> = if self.cur.u8() & 1 == 0 {
                    vec![self.cur.request(); n]
                } else {
                    (0..n).map(|_| self.cur.request()).collect()
                };
                let _ = engine::generate_many(&requests);
            }
            Op::Version => {
                let _ = engine::version();
            }
            Op::Encode => {
                let text = self.cur.text(MAX_TOKENIZER_TEXT_BYTES);
                let _ = tokenizer::encode(&text, self.cur.u8() & 1 == 1);
            }
            Op::Decode => {
                let ids = self.cur.ids();
                let _ = tokenizer::decode(&ids, self.cur.u8() & 1 == 1);
            }
            Op::ApplyChat => {
                let messages = self.cur.messages();
                let options = self.cur.options();
                let _ = tokenizer::apply_chat_template(&messages, &options);
            }
            Op::RenderChat => {
                let messages = self.cur.messages();
                let options = self.cur.options();
                let _ = tokenizer::render_chat_template(&messages, &options);
            }
            Op::Special => {
                let _ = tokenizer::special_tokens();
            }
            Op::Score => self.score(),
            Op::RewardNames => {
                let _ = rewards::names();
            }
            Op::Tool => {
                let name = match self.cur.u8() % 8 {
                    4 => "t".repeat(300),
                    k => TOOL_NAMES[usize::from(k)].to_string(),
                };
                let args = self.cur.text(MAX_TEXT_BYTES);
                let _ = tools::call(&name, &args);
            }
            Op::ToolNames => {
                let _ = tools::names();
            }
            Op::Log => {
                let level = at(&LEVELS, self.cur.u8());
                let message = self.cur.text(MAX_TEXT_BYTES);
                log::log(level, &message);
            }
            Op::Stat => {
                let key = self.cur.text(MAX_TEXT_BYTES);
                let value = at(&PADS, self.cur.u8());
                log::stat(&key, value);
            }
            Op::Handles => {
                let n = at(&HANDLE_COUNTS, self.cur.u8());
                for i in 0..n {
                    let made = Tensor::create(&TensorData::I32(vec![i as i32]), &[1]);
                    self.keep(made);
                }
            }
            Op::Print => {
                let stdout = self.cur.u8() & 1 == 1;
                let text = self.cur.text(MAX_TEXT_BYTES);
                if stdout {
                    print!("{text}");
                } else {
                    eprint!("{text}");
                }
            }
            Op::Valid => self.valid(),
            Op::Return => {}
        }
    }

    pub(crate) fn create(&mut self) {
        let dtype = self.cur.u8() % 6;
        let rank = self.cur.rank();
        let shape: Vec<u32> = (0..rank).map(|_| self.cur.dim()).collect();
        let product = shape
            .iter()
            .fold(1u128, |p, &d| p.saturating_mul(u128::from(d)));
        let wanted = match self.cur.u8() % 8 {
            0..=3 => product,
            4 => product.saturating_add(1),
            5 => product.saturating_sub(1),
            6 => 0,
            _ => u128::from(self.cur.u16()),
        };
        let fill = self.cur.u8() % 4;
        let seed = if fill == 3 { self.cur.u32() } else { 0 };
        let cap = MAX_GUEST_DATA_BYTES / ELEM_BYTES[usize::from(dtype)];
        let n = usize::try_from(wanted).map_or(cap, |w| w.min(cap));
        let data = fill_data(dtype, n, fill, seed);
        let made = Tensor::create(&data, &shape);
        drop(data);
        self.keep(made);
    }

    pub(crate) fn concat(&mut self) {
        let n = self.cur.count();
        let slots: Vec<usize> = if self.cur.u8() & 1 == 0 {
            self.pick().map(|s| vec![s; n]).unwrap_or_default()
        } else {
            (0..n).filter_map(|_| self.pick()).collect()
        };
        let refs: Vec<&Tensor> = slots.iter().filter_map(|&s| self.tensor(s)).collect();
        let made = tensor::concat(&refs);
        self.keep(made);
    }

    pub(crate) fn concat_padded(&mut self) {
        let n = usize::from(self.cur.u8() % 9);
        let mode = self.cur.u8();
        let pad = at(&PADS, self.cur.u8());
        let mut dicts: Vec<Vec<(String, usize)>> = Vec::with_capacity(n);
        if mode & 2 != 0 && !self.valid.is_empty() {
            let built = self.valid.len();
            for i in 0..n {
                dicts.push(self.valid[built - 1 - i % built].clone());
            }
        } else if mode & 1 != 0 {
            let k = usize::from(self.cur.u8() % 6);
            let keys: Vec<String> = (0..k).map(|_| self.cur.key()).collect();
            for _ in 0..n {
                let mut dict = Vec::with_capacity(k);
                for key in &keys {
                    if let Some(s) = self.pick() {
                        dict.push((key.clone(), s));
                    }
                }
                dicts.push(dict);
            }
        } else {
            for _ in 0..n {
                let k = usize::from(self.cur.u8() % 6);
                let mut dict = Vec::with_capacity(k);
                for _ in 0..k {
                    let key = self.cur.key();
                    if let Some(s) = self.pick() {
                        dict.push((key, s));
                    }
                }
                dicts.push(dict);
            }
        }
        let mut views: Vec<Vec<(String, &Tensor)>> = Vec::with_capacity(dicts.len());
        for entries in &dicts {
            let view = entries
                .iter()
                .filter_map(|(k, s)| self.tensor(*s).map(|t| (k.clone(), t)))
                .collect();
            views.push(view);
        }
        let made = tensor::concat_padded(&views, pad);
        if let Ok(out) = made {
            for (_, t) in out {
                self.slots.push(Some(t));
            }
        }
    }

    /// Use a handle id the guest does not own (stale, forged or an alias of a live one).
    pub(crate) fn forged(&mut self, id: u32, action: u8) {
        // SAFETY: deliberately not sound: the handle may be dropped, never created, another
        // resource's, or owned by another `Tensor`. Each use below is a call the host (or the
        // component model) must refuse with a trap; nothing here dereferences guest memory.
        let t = unsafe { Tensor::from_handle(id) };
        match action % 6 {
            0 => {
                let _ = t.shape();
                std::mem::forget(t);
            }
            1 => {
                let _ = t.data();
                std::mem::forget(t);
            }
            2 => {
                let made = tensor::concat(&[&t, &t]);
                self.keep(made);
                std::mem::forget(t);
            }
            3 => {
                let made = t.unsqueeze(0);
                self.keep(made);
                std::mem::forget(t);
            }
            4 => drop(t),
            _ => self.slots.push(Some(t)),
        }
    }

    pub(crate) fn score(&mut self) {
        let name = match self.cur.u8() % 8 {
            5 => "r".repeat(300),
            k => REWARD_NAMES[usize::from(k)].to_string(),
        };
        let prompt = self.cur.text(MAX_TEXT_BYTES);
        let completion = self.cur.text(MAX_TEXT_BYTES);
        let prompt_ids = self.cur.ids();
        let completion_ids = self.cur.ids();
        let data = at(&REWARD_DATA, self.cur.u8()).to_string();
        let input = RewardInput {
            prompt,
            completion,
            prompt_ids,
            completion_ids,
            data,
        };
        let _ = rewards::score(&name, &input);
    }

    /// Create `data` with `shape` and record it in `dict` under `key`.
    pub(crate) fn add(
        &mut self,
        d: &mut Vec<(String, usize)>,
        key: &str,
        data: TensorData,
        shape: &[u32],
    ) {
        if let Ok(t) = Tensor::create(&data, shape) {
            d.push((key.to_string(), self.slots.len()));
            self.slots.push(Some(t));
        }
    }

    /// AReaL's tensors for one row of `L` tokens (AReaL's RLVR layout), as a dict for CPAD
    /// and RETURN.
    pub(crate) fn valid(&mut self) {
        let len = at(&VALID_LENS, self.cur.u8());
        let variant = self.cur.u8();
        let n = len as usize;
        let row = [1, len];
        let mut dict = Vec::new();
        let ids = (0..n).map(|i| i as i32 + 1).collect();
        self.add(&mut dict, "input_ids", TensorData::I32(ids), &row);
        let mask = (0..n).map(|i| (i % 2) as i32).collect();
        self.add(&mut dict, "loss_mask", TensorData::I32(mask), &row);
        let logprobs = TensorData::F32(vec![-0.5; n]);
        self.add(&mut dict, "logprobs", logprobs, &row);
        self.add(&mut dict, "versions", TensorData::I32(vec![0; n]), &row);
        let attention = if variant & 1 != 0 {
            TensorData::I32(vec![1; n])
        } else {
            TensorData::Bool(vec![true; n])
        };
        self.add(&mut dict, "attention_mask", attention, &row);
        if variant & 2 != 0 {
            let x3 = TensorData::F32(vec![0.25; n * 2]);
            self.add(&mut dict, "x3", x3, &[1, len, 2]);
        }
        if variant & 4 == 0 {
            self.add(&mut dict, "rewards", TensorData::F32(vec![1.0]), &[1]);
        }
        self.valid.push(dict);
    }

    /// RETURN: end the episode. Handles not moved into the output are dropped on the way out.
    pub(crate) fn finish(mut self) -> Result<Option<EpisodeOutput>, String> {
        let mode = self.cur.u8() % 4;
        if mode == 0 {
            return Ok(None);
        }
        if mode == 1 {
            return Err(self.cur.text(MAX_TEXT_BYTES));
        }
        let mut tensors = Vec::new();
        let extra = if mode == 3 {
            if let Some(dict) = self.valid.last().cloned() {
                for (key, s) in dict {
                    if let Some(t) = self.slots[s].take() {
                        tensors.push((key, t));
                    }
                }
            }
            usize::from(self.cur.u8() % 3)
        } else {
            self.cur.count()
        };
        for _ in 0..extra {
            let key = self.cur.key();
            if let Some(s) = self.pick()
                && let Some(t) = self.slots[s].take()
            {
                tensors.push((key, t));
            }
        }
        let metadata = match self.cur.u8() % 8 {
            5 => {
                let text = self.cur.text(MAX_TEXT_BYTES);
                serde_json::json!({"text": text}).to_string()
            }
            k => METADATA[usize::from(k)].to_string(),
        };
        Ok(Some(EpisodeOutput { tensors, metadata }))
    }
}
