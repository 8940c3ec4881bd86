"""The fixed texts a measurement embeds (``calibration``), and the reference
vectors and an embedding server are checked with: sixteen passages on
unrelated topics, cut into query-, passage- and chunk-sized texts."""

from __future__ import annotations

_PASSAGES = (
    "Ownership is Rust's most unusual feature: each value has a single owner, and the "
    "value is dropped when the owner goes out of scope. Borrowing lets code use a value "
    "without taking ownership, through references that the compiler checks.",
    "To bake sourdough bread, feed the starter the night before, mix flour and water "
    "and rest the dough for an hour before adding salt. Fold it every half hour, shape "
    "it, and let it rise slowly in the refrigerator overnight.",
    "Hugo builds a static site from content files, templates and configuration. Each "
    "page's front matter sets its title, date, draft status and taxonomies, and the "
    "template lookup order decides which layout renders it.",
    "The James Webb Space Telescope observes in the infrared, which lets it see through "
    "dust clouds where stars form and detect light from galaxies that formed a few "
    "hundred million years after the Big Bang.",
    "Tomatoes need at least six hours of direct sun, deep watering twice a week and a "
    "stake or cage once the plants pass knee height. Pinch the side shoots on vining "
    "varieties to keep the energy in the fruit.",
    "A mortgage's annual percentage rate includes the interest rate and the fees, so "
    "two loans with the same rate can cost different amounts. Paying extra principal "
    "early shortens the term more than paying it late.",
    "Error handling in Rust uses the Result type for recoverable errors and panics for "
    "bugs. The question mark operator returns the error to the caller, converting it "
    "with the From trait when the types differ.",
    "The French Revolution began in 1789 with the storming of the Bastille. Within a "
    "few years the monarchy was abolished, the king was executed, and the Terror sent "
    "thousands to the guillotine.",
    "Shortcodes are snippets inside content files that Hugo replaces with a template's "
    "output, such as an embedded video or a figure with a caption. They take positional "
    "or named parameters.",
    "Regular aerobic exercise lowers resting heart rate and blood pressure. Guidelines "
    "suggest 150 minutes a week of moderate activity, such as brisk walking, plus two "
    "days of muscle strengthening.",
    "A hash map stores key and value pairs and finds a value by hashing its key. In "
    "Rust, HashMap takes ownership of owned keys such as String, and the entry API "
    "inserts a value only when the key is missing.",
    "Photosynthesis turns light, water and carbon dioxide into glucose and oxygen. The "
    "light reactions happen in the thylakoid membranes and the Calvin cycle in the "
    "stroma of the chloroplast.",
    "To reset the router, hold the button on the back for ten seconds until the lights "
    "blink, then wait two minutes and connect to the default network printed on the "
    "label under the device.",
    "Threads in Rust share data through Arc for shared ownership and Mutex for mutual "
    "exclusion; channels move values from one thread to another, and the type system "
    "rules out data races at compile time.",
    "The menu section of a Hugo site lists entries with a name, a weight for ordering "
    "and a URL or page reference; nested menus use a parent identifier.",
    "Coffee extraction depends on grind size, water temperature and contact time. Too "
    "fine a grind or too long a brew gives bitter coffee; too coarse gives sour, thin "
    "coffee.",
)


def _texts() -> list[str]:
    """48 texts: each passage (about 50 tokens), its first sentence (query-sized),
    and it joined with the next (chunk-sized, about 100 tokens)."""
    out: list[str] = []
    for i, passage in enumerate(_PASSAGES):
        following = _PASSAGES[(i + 1) % len(_PASSAGES)]
        out += [passage, passage.split(". ")[0], f"{passage} {following}"]
    return out


TEXTS = _texts()


def _long_texts() -> list[str]:
    """16 texts of 1,600 characters, each passage followed by the next ones: past
    the model's 256-token limit, so each is cut there, as a full chunk is."""
    joined = " ".join(_PASSAGES * 2)
    starts = [joined.index(passage) for passage in _PASSAGES]
    return [joined[start : start + 1_600] for start in starts]


LONG_TEXTS = _long_texts()
