//! The built-in generator's vocabulary: a few hundred words of simple English, grouped by
//! the role they play in a sentence.

/// Names, by the pronouns that go with them.
pub(super) const WOMEN: &[&str] = &[
    "Anna", "Clara", "Elena", "Grace", "Iris", "Lena", "Nina", "Paula", "Rosa", "Tara", "Wendy",
    "Zoe", "Maya", "Ada", "Ruth", "Helen", "Julia", "Martha", "Sofia", "Alice", "Emma", "Lucy",
    "Nora", "Vera",
];
pub(super) const MEN: &[&str] = &[
    "Ben", "David", "Felix", "Henry", "Jack", "Marco", "Oscar", "Sam", "Victor", "Hugo", "Leo",
    "Omar", "Theo", "Peter", "Thomas", "Daniel", "Arthur", "Simon", "Karl", "Milo", "Ivan", "Noah",
    "Paul", "Tom",
];
pub(super) const TOWNS: &[&str] = &[
    "Millbrook",
    "Ashford",
    "Riverton",
    "Stonebridge",
    "Westport",
    "Eldham",
    "Larkhill",
    "Greenvale",
    "Oakmere",
    "Hollowell",
    "Northcliff",
    "Redwater",
    "Fairhaven",
    "Brackenfield",
];
pub(super) const JOBS: &[&str] = &[
    "baker",
    "fisherman",
    "teacher",
    "farmer",
    "painter",
    "doctor",
    "carpenter",
    "tailor",
    "sailor",
    "gardener",
    "writer",
    "shopkeeper",
    "musician",
    "builder",
    "cook",
    "nurse",
    "clockmaker",
    "librarian",
];
/// How the companion is related to the main character, by the companion's pronouns.
pub(super) const RELATIONS_F: &[&str] = &[
    "friend",
    "sister",
    "neighbor",
    "cousin",
    "old teacher",
    "best friend",
    "aunt",
];
pub(super) const RELATIONS_M: &[&str] = &[
    "friend",
    "brother",
    "neighbor",
    "cousin",
    "old teacher",
    "best friend",
    "uncle",
];
/// Things a character can find, carry and keep.
pub(super) const THINGS: &[&str] = &[
    "book", "letter", "lamp", "basket", "key", "map", "coat", "bell", "box", "clock", "candle",
    "kettle", "hat", "ring", "drum", "violin", "bottle", "blanket", "compass", "mirror", "cup",
    "jar", "bag", "kite", "bucket", "ladder", "rope", "shovel", "umbrella", "notebook", "photo",
    "scarf", "wallet", "necklace", "painting", "chair", "wheel", "pencil", "radio", "shell",
];
/// Places in and around a town.
pub(super) const PLACES: &[&str] = &[
    "the market",
    "the harbor",
    "the old mill",
    "the library",
    "the station",
    "the bakery",
    "the school",
    "the church",
    "the bridge",
    "the river",
    "the forest",
    "the hill",
    "the beach",
    "the farm",
    "the square",
    "the garden",
    "the lake",
    "the museum",
    "the post office",
    "the meadow",
    "the orchard",
    "the tower",
];
pub(super) const ROOMS: &[&str] = &[
    "kitchen", "attic", "bedroom", "shed", "cellar", "workshop", "hall", "study",
];
pub(super) const ADJECTIVES: &[&str] = &[
    "old",
    "small",
    "heavy",
    "bright",
    "dusty",
    "broken",
    "shiny",
    "tiny",
    "strange",
    "lovely",
    "red",
    "blue",
    "green",
    "yellow",
    "wooden",
    "silver",
    "golden",
    "cracked",
    "warm",
    "cold",
    "quiet",
    "light",
    "soft",
    "round",
    "tall",
    "narrow",
    "simple",
    "precious",
    "rusty",
    "clean",
    "wet",
    "ancient",
    "new",
    "plain",
    "curious",
    "beautiful",
    "worn",
    "fragile",
    "large",
];
/// Character traits, for introductions.
pub(super) const TRAITS: &[&str] = &[
    "kind", "careful", "cheerful", "curious", "patient", "brave", "quiet", "clever", "busy",
    "gentle", "stubborn", "honest", "restless", "shy", "generous", "tired", "young", "old",
];
/// Past tense verbs taking an object.
pub(super) const VERBS_T: &[&str] = &[
    "cleaned", "painted", "fixed", "opened", "wrapped", "carried", "washed", "polished",
    "measured", "examined", "lifted", "dropped", "hid", "moved", "borrowed", "mended", "sold",
    "bought", "lost", "dried", "studied", "tied",
];
/// What someone does with a thing they are given.
pub(super) const VERBS_CARE: &[&str] = &[
    "examined", "cleaned", "polished", "opened", "carried", "wrapped", "measured", "admired",
];
/// Past tense verbs without an object, that work alone or together.
pub(super) const VERBS_I: &[&str] = &[
    "walked", "waited", "laughed", "sang", "rested", "worked", "smiled", "read", "danced",
    "whistled", "cooked", "talked", "played",
];
/// Past tense verbs of going somewhere.
pub(super) const VERBS_GO: &[&str] = &[
    "walked", "hurried", "wandered", "rode", "cycled", "ran", "drove", "went",
];
pub(super) const ADVERBS: &[&str] = &[
    "slowly",
    "quietly",
    "carefully",
    "happily",
    "quickly",
    "gently",
    "patiently",
    "proudly",
    "nervously",
    "calmly",
    "eagerly",
    "softly",
    "bravely",
    "sadly",
];
pub(super) const TIMES: &[&str] = &[
    "in the morning",
    "after lunch",
    "that evening",
    "on Sunday",
    "before dawn",
    "at noon",
    "late at night",
    "on Monday",
    "in the afternoon",
    "during the storm",
    "after the rain",
    "one spring day",
    "at the end of the summer",
    "on a cold winter night",
    "the next day",
];
pub(super) const WEATHER: &[&str] = &[
    "The wind was cold and the sky was grey.",
    "The sun was warm on the roofs.",
    "Rain fell on the streets all day.",
    "A thick fog covered the valley.",
    "Snow lay on the fields.",
    "The air smelled of bread and salt.",
    "The clouds moved fast over the hills.",
    "It was a calm and clear day.",
    "The evening light was soft and golden.",
];
pub(super) const FOODS: &[&str] = &[
    "bread", "soup", "tea", "fish", "cake", "coffee", "pie", "rice", "stew", "porridge",
];
pub(super) const ANIMALS: &[&str] = &[
    "dog", "cat", "horse", "goat", "owl", "fox", "duck", "rabbit", "crow", "donkey",
];
pub(super) const FEELINGS: &[&str] = &[
    "happy",
    "worried",
    "surprised",
    "proud",
    "tired",
    "calm",
    "hopeful",
    "confused",
    "glad",
];
