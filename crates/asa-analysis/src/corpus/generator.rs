//! The built-in corpus: a seeded generator of simple English prose, used when the user gives
//! no `--corpus` (a fresh clone has no data) and as the demo's training text.
//!
//! Each document is a short story of a few paragraphs about one main character, a companion,
//! a town and an object. The same names come back sentence after sentence ("Clara ... she
//! ... Clara's lamp"), so attention has repeated entities to find. Text uses only lower- and
//! upper-case letters, spaces, commas, full stops and newlines, so even a tiny tokenizer
//! covers it. Output depends only on the seed: document k of a seed is the same however many
//! documents are drawn.

/// A small self-contained PRNG (splitmix64): deterministic on every platform.
#[derive(Debug, Clone)]
pub(super) struct SplitMix64(pub(super) u64);

impl SplitMix64 {
    /// The next value: the state advances by 0x9E3779B97F4A7C15, then is mixed.
    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0): `next_u64() % n` (the tiny modulo bias is irrelevant).
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

use super::words::*;

/// A character: a name and the pronouns that go with it.
#[derive(Debug, Clone, Copy)]
struct Person {
    name: &'static str,
    she: &'static str,
    her: &'static str,
    /// Possessive ("her", "his").
    hers: &'static str,
    woman: bool,
}

impl Person {
    fn draw(rng: &mut SplitMix64, not: Option<&str>) -> Person {
        loop {
            let woman = rng.chance(50);
            let p = if woman {
                Person {
                    name: rng.pick(WOMEN),
                    she: "she",
                    her: "her",
                    hers: "her",
                    woman,
                }
            } else {
                Person {
                    name: rng.pick(MEN),
                    she: "he",
                    her: "him",
                    hers: "his",
                    woman,
                }
            };
            if Some(p.name) != not {
                return p;
            }
        }
    }
}

/// The cast and props of one story.
struct Story {
    hero: Person,
    other: Person,
    relation: &'static str,
    town: &'static str,
    job: &'static str,
    thing: &'static str,
    thing_adj: &'static str,
    place: &'static str,
    animal: &'static str,
}

/// "a" or "an" before `word`.
fn article(word: &str) -> &'static str {
    match word.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    }
}

/// Upper-cases the first letter.
fn capitalize(s: &str) -> String {
    let mut cs = s.chars();
    match cs.next() {
        Some(c) => c.to_uppercase().chain(cs).collect(),
        None => String::new(),
    }
}

/// Number of middle-sentence templates in [`Story::sentence`].
const TEMPLATES: usize = 23;

impl Story {
    fn draw(rng: &mut SplitMix64) -> Story {
        let hero = Person::draw(rng, None);
        let other = Person::draw(rng, Some(hero.name));
        let relations = if other.woman {
            RELATIONS_F
        } else {
            RELATIONS_M
        };
        Story {
            hero,
            other,
            relation: rng.pick(relations),
            town: rng.pick(TOWNS),
            job: rng.pick(JOBS),
            thing: rng.pick(THINGS),
            thing_adj: rng.pick(ADJECTIVES),
            place: rng.pick(PLACES),
            animal: rng.pick(ANIMALS),
        }
    }

    /// The main character as a subject pronoun, or by name when the pronoun would not say
    /// which of the two is meant.
    fn she(&self) -> &'static str {
        if self.hero.woman == self.other.woman {
            self.hero.name
        } else {
            self.hero.she
        }
    }

    /// The opening sentence of the story.
    fn introduction(&self, rng: &mut SplitMix64) -> String {
        let (h, trait_, job) = (self.hero.name, rng.pick(TRAITS), self.job);
        match rng.below(4) {
            0 => format!(
                "{h} was {} {trait_} {job} who lived in {}.",
                article(trait_),
                self.town
            ),
            1 => format!(
                "In the town of {} there lived {} {job} named {h}.",
                self.town,
                article(job)
            ),
            2 => format!("Everyone in {} knew {h}, the {trait_} {job}.", self.town),
            _ => format!(
                "{h} had worked as {} {job} in {} for many years.",
                article(job),
                self.town
            ),
        }
    }

    /// The sentence that brings in the companion.
    fn companion(&self, rng: &mut SplitMix64) -> String {
        let (his, rel, o) = (self.hero.hers, self.relation, self.other.name);
        let s = match rng.below(3) {
            0 => format!("{his} {rel} {o} came to visit {}.", rng.pick(TIMES)),
            1 => format!("{his} {rel}, {o}, lived near {}.", rng.pick(PLACES)),
            _ => format!(
                "{o} was {} {rel}, and they saw each other every day.",
                self.hero.hers
            ),
        };
        capitalize(&s)
    }

    /// The sentence that brings in the story's current object.
    fn discovery(&self, rng: &mut SplitMix64) -> String {
        let (t, adj) = (self.thing, self.thing_adj);
        let a = article(adj);
        let s = match rng.below(3) {
            0 => format!(
                "One day {} found {a} {adj} {t} near {}.",
                self.she(),
                rng.pick(PLACES)
            ),
            1 => format!(
                "{}, {} found {a} {adj} {t} in {} {}.",
                rng.pick(TIMES),
                self.hero.name,
                self.hero.hers,
                rng.pick(ROOMS)
            ),
            _ => format!(
                "At {}, {} found {a} {adj} {t}.",
                rng.pick(PLACES),
                self.hero.name
            ),
        };
        capitalize(&s)
    }

    /// Sentence `template` (`0..TEMPLATES`) of the story's middle: varied structure, the same
    /// names again and again.
    fn sentence(&self, rng: &mut SplitMix64, template: usize) -> String {
        let (h, o, t) = (self.hero.name, self.other.name, self.thing);
        let she = self.she();
        let adj = rng.pick(ADJECTIVES);
        let verb = rng.pick(VERBS_T);
        let verb_i = rng.pick(VERBS_I);
        let adverb = rng.pick(ADVERBS);
        let time = rng.pick(TIMES);
        let place = rng.pick(PLACES);
        let s = match template {
            0 => format!("{time}, {h} {} to {place}.", rng.pick(VERBS_GO)),
            1 => format!("{h} {verb} the {t} {adverb}."),
            2 => format!("{o} looked at the {t} and said that it was very {adj}."),
            3 => rng.pick(WEATHER).to_string(),
            4 => format!("{h} and {o} {verb_i} together until it was dark."),
            5 => format!(
                "When {h} came back to {}, the {t} was still {}.",
                self.town, self.thing_adj
            ),
            6 => format!(
                "{h} gave the {t} to {o}, who {} it {adverb}.",
                rng.pick(VERBS_CARE)
            ),
            7 => format!(
                "The {} from {} followed {h} all the way to {place}.",
                self.animal, self.place
            ),
            8 => format!("{h} felt {} because the {t} was {adj}.", rng.pick(FEELINGS)),
            9 => format!(
                "{o} made {} for {h}, and they ate in the {}.",
                rng.pick(FOODS),
                rng.pick(ROOMS)
            ),
            10 => format!("{o} {verb_i} {adverb} while {she} {verb} the {t}."),
            11 => format!(
                "Nobody in {} had ever seen such {} {} {t}.",
                self.town,
                article(self.thing_adj),
                self.thing_adj
            ),
            12 => format!("{o} asked {h} where the {t} came from, but {she} did not know."),
            13 => format!(
                "{time}, {she} put the {t} in {} {}.",
                self.hero.hers,
                rng.pick(ROOMS)
            ),
            14 => {
                let other_thing = rng.pick(THINGS);
                format!(
                    "{h} saw {} {adj} {other_thing} at {place} and stopped to look at it.",
                    article(adj)
                )
            }
            15 => format!("{h} told {o} about the {t}."),
            16 => format!("{she} {verb_i} {adverb}, and then {she} {verb} the {t} again."),
            17 => format!("The {} watched {o} from {place}.", self.animal),
            18 => format!(
                "{h} went to {place} with {o}, and the {} went with them.",
                self.animal
            ),
            19 => format!(
                "{o} helped {} carry the {t} to {place}.",
                if self.hero.woman == self.other.woman {
                    h
                } else {
                    self.hero.her
                }
            ),
            20 => format!("{o} thought about {h} and the {t} for a long time."),
            21 => format!(
                "{time}, {h} and {o} sat by the window and talked about {}.",
                self.town
            ),
            _ => format!("The {t} was {adj}, but {h} liked it anyway."),
        };
        capitalize(&s)
    }

    /// The last sentence of the story.
    fn ending(&self, rng: &mut SplitMix64) -> String {
        let (h, o, t) = (self.hero.name, self.other.name, self.thing);
        match rng.below(4) {
            0 => format!(
                "In the end, {h} kept the {t} in {} {}.",
                self.hero.hers,
                rng.pick(ROOMS)
            ),
            1 => format!(
                "From that day on, {h} and {o} met at {} every week.",
                self.place
            ),
            2 => format!(
                "Years later, people in {} still talked about {h} and the {} {t}.",
                self.town, self.thing_adj
            ),
            _ => format!("{o} never forgot the day {h} found the {t}."),
        }
    }
}

/// One story: 2 to 4 paragraphs of about 4 to 8 sentences, separated by a blank line. The
/// first paragraph introduces the main character, a companion and an object; a later one
/// may bring in a new object.
fn document(rng: &mut SplitMix64) -> String {
    let mut story = Story::draw(rng);
    let paragraphs = rng.range(2, 4);
    let mut out = Vec::with_capacity(paragraphs);
    for p in 0..paragraphs {
        let mut sentences = Vec::new();
        if p == 0 {
            sentences.push(story.introduction(rng));
            sentences.push(story.companion(rng));
            sentences.push(story.discovery(rng));
        } else if rng.chance(40) {
            story.thing = rng.pick(THINGS);
            story.thing_adj = rng.pick(ADJECTIVES);
            sentences.push(story.discovery(rng));
        }
        // No template twice in a paragraph.
        let mut used = Vec::new();
        for _ in 0..rng.range(3, 6) {
            let mut template = rng.below(TEMPLATES);
            while used.contains(&template) {
                template = rng.below(TEMPLATES);
            }
            used.push(template);
            sentences.push(story.sentence(rng, template));
        }
        if p + 1 == paragraphs {
            sentences.push(story.ending(rng));
        }
        out.push(sentences.join(" "));
    }
    out.join("\n\n")
}

/// The endless sequence of documents (stories) for a seed.
#[derive(Debug, Clone)]
pub struct Documents {
    rng: SplitMix64,
}

impl Iterator for Documents {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        Some(document(&mut self.rng))
    }
}

/// The built-in documents for `seed`, in order; never ends.
pub fn documents(seed: u64) -> Documents {
    Documents {
        rng: SplitMix64(seed),
    }
}

/// At least `approx_chars` characters of prose for `seed` (whole documents, separated by a
/// blank line; overshoots by less than one document).
pub fn generate_text(seed: u64, approx_chars: usize) -> String {
    let mut text = String::new();
    for doc in documents(seed) {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&doc);
        if text.len() >= approx_chars {
            break;
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn articles_and_capitals() {
        assert_eq!(article("apple"), "an");
        assert_eq!(article("book"), "a");
        assert_eq!(capitalize("in the morning"), "In the morning");
    }
}
