//! What the GPU will run, read without a GPU: the SASS of an assembled module (`nvdisasm`, from
//! the PyPI wheel `nvidia-cuda-nvdisasm`), per entry point an instruction mix, and the rules every
//! kernel must keep ([`violations`]) — the static guard behind `tests/jit_sass.rs`, which fails
//! CI on a codegen regression and snapshots the per-entry report so a change shows in review.

use crate::{EntrySpec, child};
use std::collections::BTreeMap;
use std::path::Path;

/// The instruction classes the report counts (an opcode counts for the first class it starts
/// with): global loads and stores, packed conversions, FMA and the other float ops, shuffles,
/// barriers, the special-function unit, integer multiply-adds (mostly addressing).
pub const CLASSES: &[&str] = &["LDG", "STG", "F2FP", "FFMA", "FMUL", "FADD", "SHFL", "BAR", "MUFU", "IMAD"];

/// One entry point's SASS: how many instructions of each opcode (the part before the first `.`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sass {
    pub opcodes: BTreeMap<String, u32>,
    /// Every immediate operand written as hex (`0x7fff`), for rules about constants.
    pub hex_immediates: BTreeMap<String, u32>,
    /// The most global loads issued, one after another, before an instruction reads a register
    /// one of them loads: how many of a batch are in flight together. ptxas may issue a batch's
    /// loads one at a time, each right before its own arithmetic (docs/device-code.md, Memory).
    pub loads_in_flight: u32,
}

/// The global loads issued since the last read of a loaded register, and the registers they load.
#[derive(Default)]
struct LoadBatch {
    issued: u32,
    registers: Vec<u32>,
}

impl LoadBatch {
    /// Follows one instruction (`opcode` with its modifiers, then its operands); the batch's
    /// depth when the instruction reads a register a pending load writes (which ends the batch).
    fn step(&mut self, opcode: &str, operands: &str) -> Option<u32> {
        let mut operands = operands.split(',');
        // The first operand is written, but by stores and reductions (which write memory).
        let written = if opcode.starts_with("ST") || opcode.starts_with("RED") { None } else { operands.next() };
        let read: Vec<u32> = operands.flat_map(registers).collect();
        let depth = read.iter().any(|r| self.registers.contains(r)).then(|| std::mem::take(self).issued);
        if opcode.starts_with("LDG") {
            let width = if opcode.contains(".128") {
                4
            } else if opcode.contains(".64") {
                2
            } else {
                1
            };
            let first = written.and_then(|w| registers(w).next()).unwrap_or(u32::MAX);
            self.registers.extend((0..width).map(|i| first.saturating_add(i)));
            self.issued += 1;
        }
        depth
    }
}

/// The general registers an operand names (`R4`, `R4.reuse`, `-R4`, `desc[UR4][R2.64]`: R2 and
/// R3), not `RZ` nor uniform ones.
fn registers(operand: &str) -> impl Iterator<Item = u32> + '_ {
    operand
        .match_indices('R')
        .filter_map(move |(at, _)| {
            let before = operand[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric()) {
                return None;
            }
            let digits: String = operand[at + 1..].chars().take_while(char::is_ascii_digit).collect();
            let register = digits.parse::<u32>().ok()?;
            let pair = operand[at + 1 + digits.len()..].starts_with(".64");
            Some([register].into_iter().chain(pair.then_some(register + 1)))
        })
        .flatten()
}

impl Sass {
    pub fn instructions(&self) -> u32 {
        self.opcodes.values().sum()
    }

    /// Instructions whose opcode starts with `class`.
    pub fn count(&self, class: &str) -> u32 {
        self.opcodes.iter().filter(|(op, _)| op.starts_with(class)).map(|(_, n)| n).sum()
    }
}

/// Runs `nvdisasm` on `cubin`: each entry point's SASS by name.
pub fn disassemble(nvdisasm: &Path, cubin: &Path) -> Result<BTreeMap<String, Sass>, String> {
    let output = child::command(nvdisasm)
        .arg("-c")
        .arg(cubin)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", nvdisasm.display()))?;
    if !output.status.success() {
        return Err(format!("{} failed: {}", nvdisasm.display(), String::from_utf8_lossy(&output.stderr)));
    }
    Ok(parse(&String::from_utf8_lossy(&output.stdout)))
}

/// Parses `nvdisasm -c` output: `.text.NAME` opens a function; `/*0040*/  @P0 OPCODE.MOD …;` is
/// an instruction.
pub fn parse(text: &str) -> BTreeMap<String, Sass> {
    let mut functions: BTreeMap<String, Sass> = BTreeMap::new();
    let mut batches: BTreeMap<String, LoadBatch> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(section) = line.strip_prefix(".section").map(str::trim).and_then(|s| s.strip_prefix(".text.")) {
            let name = section.split([',', ' ', '\t']).next().unwrap_or(section);
            current = Some(name.to_owned());
            functions.entry(name.to_owned()).or_default();
            continue;
        }
        let (Some(name), Some(rest)) = (&current, line.strip_prefix("/*")) else { continue };
        let Some((_, instruction)) = rest.split_once("*/") else { continue };
        let mut words = instruction.split_whitespace().skip_while(|w| w.starts_with('@') || w.starts_with('{'));
        let Some(opcode) = words.next() else { continue };
        let base = opcode.trim_end_matches(';').split('.').next().unwrap_or(opcode);
        if base.is_empty() || !base.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
            continue;
        }
        let sass = functions.entry(name.clone()).or_default();
        *sass.opcodes.entry(base.to_owned()).or_default() += 1;
        let operands: String = words.collect::<Vec<_>>().join(" ");
        if let Some(depth) = batches.entry(name.clone()).or_default().step(opcode, operands.trim_end_matches(';')) {
            sass.loads_in_flight = sass.loads_in_flight.max(depth);
        }
        for word in instruction.split([' ', ',', ';', '[', ']']) {
            if let Some(hex) = word.strip_prefix("0x") {
                *sass.hex_immediates.entry(format!("0x{hex}")).or_default() += 1;
            }
        }
    }
    functions
}

/// Whether an entry stores 16-bit floats: its `stores`, else its first generic argument.
fn stores_half_precision(entry: &EntrySpec) -> bool {
    let stored = entry.stores.as_deref().or(entry.generics.first().map(String::as_str));
    stored.is_some_and(|g| g == "element::Bf16" || g == "element::F16")
}

/// How many loads and stores of distributed shared memory (`ld/st.shared::cluster`: another
/// block's shared memory in a cluster) entry `name` of `ptx` asks for: these have no dedicated
/// SASS instruction and become generic `LD`/`ST`.
pub fn cluster_accesses(ptx: &str, name: &str) -> (usize, usize) {
    let start = ptx.find(&format!(".entry {name}(")).map_or(ptx.len(), |i| i + 1);
    let body = &ptx[start..];
    let body = &body[..body.find(".entry ").unwrap_or(body.len())];
    (body.matches("ld.shared::cluster").count(), body.matches("st.shared::cluster").count())
}

/// What is wrong with an entry point's machine code (`sass`, from `ptx`), if anything:
/// - a generic `LD`/`ST` (the tensors are global memory: `LDG`/`STG` skip the address-space
///   check and are what the kernels ask for) beyond the entry's distributed shared memory
///   accesses ([`cluster_accesses`]);
/// - local memory (`LDL`/`STL`: a spilled register array);
/// - a kernel storing bf16/f16 without the hardware conversion (`F2FP`), or with the software
///   rounding's `0x7fff` bias;
/// - more registers than the entry's budget (`max_registers`).
pub fn violations(entry: &EntrySpec, sass: &Sass, registers: u32, ptx: &str) -> Vec<String> {
    let mut found = Vec::new();
    let (cluster_loads, cluster_stores) = cluster_accesses(ptx, &entry.name);
    for (generic, cluster) in [("LD", cluster_loads), ("ST", cluster_stores)] {
        if let Some(&n) = sass.opcodes.get(generic).filter(|&&n| n as usize > cluster) {
            found.push(format!(
                "{n} generic {generic} (expected {generic}G for global memory; {cluster} for distributed shared memory)"
            ));
        }
    }
    for local in ["LDL", "STL"] {
        if let Some(n) = sass.opcodes.get(local) {
            found.push(format!("{n} {local}: local memory (a spilled register array)"));
        }
    }
    if stores_half_precision(entry) {
        if sass.count("F2FP") == 0 {
            found.push("stores bf16/f16 without the hardware conversion (no F2FP)".into());
        }
        if sass.hex_immediates.contains_key("0x7fff") {
            found.push("rounds to bf16 in software (a 0x7fff rounding bias)".into());
        }
    }
    if let Some(budget) = entry.max_registers
        && registers > budget
    {
        found.push(format!("{registers} registers, over its budget of {budget}"));
    }
    found
}

/// One line of the report: registers, spills, instruction count and the mix by class.
pub fn report_line(name: &str, sass: &Sass, registers: u32, spill_bytes: u32) -> String {
    let mix: Vec<String> = CLASSES.iter().map(|class| format!("{class} {}", sass.count(class))).collect();
    let (instructions, in_flight) = (sass.instructions(), sass.loads_in_flight);
    format!(
        "{name}: {registers} regs, {spill_bytes} B spilled, {instructions} instr, {in_flight} LDG in flight | {}",
        mix.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
//--------------------- .text.k_a --------------------------
\t.section\t.text.k_a,\"ax\",@progbits
k_a:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/              @!P0 LDG.E.NA.128.CONSTANT R4, desc[UR4][R2.64] ;
        /*0020*/                   F2FP.BF16.F32.PACK_AB R5, R6, R7 ;
        /*0030*/                   STG.E.128 desc[UR4][R2.64], R4 ;
\t.section\t.text.k_b,\"ax\",@progbits
        /*0000*/                   LD.E.128 R4, [R2.64] ;
        /*0010*/                   IADD3 R5, R4, 0x7fff, RZ ;
        /*0020*/                   STL.64 [R1], R4 ;
";

    fn entry(name: &str, first_generic: &str, cap: Option<u32>) -> EntrySpec {
        EntrySpec {
            name: name.into(),
            kernel: "k".into(),
            params: "P".into(),
            generics: vec![first_generic.into()],
            max_registers: cap,
            stores: None,
        }
    }

    #[test]
    fn parses_functions_opcodes_and_immediates() {
        let parsed = parse(SAMPLE);
        let a = &parsed["k_a"];
        assert_eq!((a.count("LDG"), a.count("STG"), a.count("F2FP"), a.instructions()), (1, 1, 1, 4));
        assert_eq!(parsed["k_b"].opcodes.get("LD"), Some(&1));
        assert_eq!(parsed["k_b"].hex_immediates.get("0x7fff"), Some(&1));
    }

    #[test]
    fn loads_in_flight_counts_a_batch_until_its_first_use() {
        let batched = "\
\t.section\t.text.k,\"ax\",@progbits
        /*0000*/              @!P0 LDG.E.128.CONSTANT R24, desc[UR4][R2.64] ;
        /*0010*/                   IADD3 R30, P0, R2, 0x200, RZ ;
        /*0020*/              @!P1 LDG.E.128.CONSTANT R28, desc[UR4][R30.64] ;
        /*0030*/                   LDG.E.64 R32, desc[UR4][R2.64+0x400] ;
        /*0040*/                   FMNMX R40, RZ, R27, !PT ;
        /*0050*/                   LDG.E R34, desc[UR4][R2.64] ;
        /*0060*/                   STG.E desc[UR4][R6.64], R34 ;
";
        assert_eq!(parse(batched)["k"].loads_in_flight, 3, "three loads before R27 (the first's) is read");
        let one_at_a_time = "\
\t.section\t.text.k,\"ax\",@progbits
        /*0000*/                   LDG.E.128.CONSTANT R24, desc[UR4][R2.64] ;
        /*0010*/                   FSETP.GEU.AND P0, PT, R24, UR11, PT ;
        /*0020*/                   LDG.E.128.CONSTANT R28, desc[UR4][R24.64] ;
        /*0030*/                   FMUL R30, R28.reuse, UR19 ;
";
        assert_eq!(parse(one_at_a_time)["k"].loads_in_flight, 1, "each load read before the next is issued");
        assert_eq!(registers("desc[UR4][R2.64+0x10]").collect::<Vec<_>>(), [2, 3]);
        assert_eq!(registers("-R7.reuse").chain(registers("RZ")).chain(registers("UR5")).collect::<Vec<_>>(), [7]);
    }

    #[test]
    fn each_rule_fires_and_clean_code_passes() {
        let parsed = parse(SAMPLE);
        assert!(violations(&entry("k_a", "element::Bf16", Some(64)), &parsed["k_a"], 40, "").is_empty());
        let bad = violations(&entry("k_b", "element::Bf16", Some(64)), &parsed["k_b"], 80, "");
        let text = bad.join("\n");
        for expected in ["generic LD", "STL: local memory", "no F2FP", "0x7fff", "80 registers, over its budget of 64"]
        {
            assert!(text.contains(expected), "{expected:?} missing from:\n{text}");
        }
        assert!(violations(&entry("k_b", "f32", None), &parsed["k_b"], 80, "").iter().all(|v| !v.contains("F2FP")));
        let stores_f32 = EntrySpec { stores: Some("f32".into()), ..entry("k_b", "element::Bf16", None) };
        assert!(violations(&stores_f32, &parsed["k_b"], 80, "").iter().all(|v| !v.contains("F2FP")));
    }

    #[test]
    fn generic_accesses_of_distributed_shared_memory_are_allowed_and_no_more() {
        let ptx = ".visible .entry k_b(\n ld.shared::cluster.f32 %f1, [%r1];\n}\n.visible .entry k_c(\n st.shared::cluster.f32 [%r1], %f1;\n}";
        assert_eq!((cluster_accesses(ptx, "k_b"), cluster_accesses(ptx, "k_c")), ((1, 0), (0, 1)));
        let parsed = parse(SAMPLE);
        let found = violations(&entry("k_b", "f32", None), &parsed["k_b"], 8, ptx);
        assert!(found.iter().all(|v| !v.contains("generic LD")), "{found:?}");
        let found = violations(&entry("k_c", "f32", None), &parsed["k_b"], 8, ptx);
        assert!(found.iter().any(|v| v.contains("1 generic LD")), "{found:?}");
    }
}
