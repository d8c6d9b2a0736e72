#!/usr/bin/env python3
"""Real lm-evaluation-harness v0.4.x result JSON files for `asa-analyze tables`.

Regenerate (from anywhere; paths are relative to the repository root) with:

    python3 -m venv /tmp/lmeval-venv
    /tmp/lmeval-venv/bin/pip install "lm-eval[hf]>=0.4,<0.5" torch transformers
    /tmp/lmeval-venv/bin/python tools/make_lm_eval_fixture.py

Made with lm-eval 0.4.13, torch 2.15.0, transformers 5.24.0, datasets 5.2.0, accelerate 1.15.0
(the `hf` extra: lm-eval's hf model imports accelerate), Python 3.11.7;
CPU only, no GPU, no network.

What it does, all offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE / TRANSFORMERS_OFFLINE
are set for the lm_eval runs):

1. In a temporary folder, writes two tiny random causal LMs with transformers' own
   `save_pretrained` (LlamaConfig: hidden 32, intermediate 64, 2 layers, 4 heads, 2 kv
   heads, vocab 49152 = the tokenizer's; `torch.manual_seed` 1 for "baseline", 2 for
   "asa"), each next to a tokenizer: the real GPT2-style byte-level BPE `tokenizer.json` at
   `/root/.cache/asa-analyze/smollm2/hf/tokenizer.json` (SmolLM2's) loaded with
   `PreTrainedTokenizerFast(tokenizer_file=...)`, eos = bos = pad = `<|endoftext|>`.
2. Writes six local multiple-choice tasks in lm-eval's YAML task format, named exactly
   as the paper's tasks (winogrande, piqa, hellaswag, arc_challenge, arc_easy, boolq),
   each over a local JSONL file of 16 hand-written documents (`dataset_path: json`,
   `dataset_kwargs.data_files`). They are passed with `--include_path`; lm-eval 0.4.13
   lets an include path override its built-in task of the same name (it logs "Task 'x'
   from ... overrides existing task from ..."), and the script checks that the
   evaluated document count is 16 per task, so the built-in (online) definitions were
   not used. The fields and prompts mirror the real tasks (arc: question / choices /
   answerKey; piqa: goal / sol1 / sol2 / label; boolq: passage / question / label with
   choices no / yes; hellaswag: ctx / endings / label; winogrande: sentence with a `_`,
   option1 / option2 / answer "1" / "2"). As in the real harness, winogrande and boolq
   report `acc` only, the other four `acc` and `acc_norm`.
3. Runs the real CLI once per model as a subprocess:
   `lm_eval --model hf --model_args pretrained=DIR,dtype=float32 --device cpu
   --tasks winogrande,piqa,hellaswag,arc_challenge,arc_easy,boolq --include_path TASKS
   --output_path OUT --batch_size 4 --seed 1234` (OMP_NUM_THREADS=1 for repeatable float
   sums), finds the `results_*.json` it wrote and copies it byte for byte to
   `tests/fixtures/lm_eval/<label>.json` (labels "baseline" and "asa").
4. Writes `tests/fixtures/lm_eval/README.md`.

The numbers are lm-eval's own output, never edited. Only if a file were over 60 KB would
it be rewritten (json.dumps, indent 2, key order kept) without the bulky keys in
DROP_IF_LARGE (`configs`, `samples`), and the README would say so; with these six small
tasks and no `--log_samples` the files are about 18 KB and nothing is dropped. The work
folder is the fixed WORK_DIR (deleted before and after), so the paths lm-eval records
(`model_name`, `config.model_args`, `configs.*.dataset_kwargs`) are the same on every
rerun; `date` and `total_evaluation_time_seconds` still change (and `pretty_env_info`,
`transformers_version`, `lm_eval_version` on another machine), while `results` is identical
(checked: three full runs gave the same `results` blocks, and with the fixed WORK_DIR the
files differed only in `date` and `total_evaluation_time_seconds`).
A run takes about 40 s on 2 CPU cores.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "tests" / "fixtures" / "lm_eval"
WORK_DIR = Path(tempfile.gettempdir()) / "asa_lmeval_fixture"
TOKENIZER_JSON = Path("/root/.cache/asa-analyze/smollm2/hf/tokenizer.json")
MODELS = [("baseline", 1), ("asa", 2)]
TASKS = ["winogrande", "piqa", "hellaswag", "arc_challenge", "arc_easy", "boolq"]
N_DOCS = 16
MAX_BYTES = 60_000
DROP_IF_LARGE = ["configs", "samples"]
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}

# --------------------------------------------------------------------------- data
# Hand-written documents, 16 per task, in the real datasets' field layouts.

WINOGRANDE = [
    ("The trophy did not fit in the suitcase because the _ was too big.", "trophy", "suitcase", "1"),
    ("The trophy did not fit in the suitcase because the _ was too small.", "trophy", "suitcase", "2"),
    ("Anna lent Maria her umbrella because _ had two of them.", "Anna", "Maria", "1"),
    ("Anna lent Maria her umbrella because _ had forgotten hers.", "Anna", "Maria", "2"),
    ("The cat chased the mouse until the _ was exhausted and hid.", "cat", "mouse", "2"),
    ("The cat chased the mouse until the _ got bored and slept.", "cat", "mouse", "1"),
    ("Tom poured water from the bottle into the cup until the _ was empty.", "bottle", "cup", "1"),
    ("Tom poured water from the bottle into the cup until the _ was full.", "bottle", "cup", "2"),
    ("The doctor called the patient because _ had the test results.", "the doctor", "the patient", "1"),
    ("The doctor called the patient because _ was waiting for news.", "the doctor", "the patient", "2"),
    ("The ice melted faster on the stove than on the table because the _ was hot.", "stove", "table", "1"),
    ("The ice melted faster on the stove than on the table because the _ was cold.", "stove", "table", "2"),
    ("Sam could not lift the box onto the shelf because the _ was too heavy.", "box", "shelf", "1"),
    ("Sam could not lift the box onto the shelf because the _ was too high.", "box", "shelf", "2"),
    ("The lawyer asked the witness a question, but _ refused to repeat it.", "the lawyer", "the witness", "1"),
    ("The lawyer asked the witness a question, but _ refused to answer it.", "the lawyer", "the witness", "2"),
]

PIQA = [
    ("How do you open a jar with a tight lid?", "Run the lid under hot water, then twist it.", "Put the jar in the freezer, then twist the glass.", 0),
    ("How do you keep bread fresh for longer?", "Leave it uncovered in the sun.", "Store it in a sealed bag in a cool place.", 1),
    ("How can you dry wet shoes quickly?", "Stuff them with newspaper and leave them near a fan.", "Fill them with water and close them in a box.", 0),
    ("How do you sharpen a pencil without a sharpener?", "Rub it on a pillow.", "Carefully shave the wood with a knife.", 1),
    ("How do you cool a hot drink fast?", "Add an ice cube and stir.", "Cover it with a blanket.", 0),
    ("How do you remove a splinter from a finger?", "Soak it in glue overnight.", "Pull it out with clean tweezers.", 1),
    ("How do you stop a door from squeaking?", "Put a little oil on the hinges.", "Paint the handle a new color.", 0),
    ("How do you find a small screw dropped on a carpet?", "Vacuum the whole room with the bag removed.", "Put a sock over the vacuum hose and vacuum slowly.", 1),
    ("How do you keep a cut apple from turning brown?", "Brush it with lemon juice.", "Leave it in a warm oven.", 0),
    ("How do you untangle a knotted necklace?", "Pull both ends as hard as you can.", "Add a drop of oil and loosen the knot with a pin.", 1),
    ("How do you make ice cubes clearer?", "Freeze boiled water slowly.", "Freeze salty water quickly.", 0),
    ("How do you clean a blender easily?", "Put it in the dryer.", "Blend warm water with a drop of soap, then rinse.", 1),
    ("How do you carry many grocery bags at once?", "Slide the handles onto a broom handle and lift it.", "Tie the bags to your shoelaces.", 0),
    ("How do you soften hard brown sugar?", "Put it in the freezer for a day.", "Seal it in a bag with a slice of bread.", 1),
    ("How do you keep a candle from dripping?", "Chill the candle in the fridge before lighting it.", "Light it at both ends.", 0),
    ("How do you stop onions making you cry?", "Cut them with a dull knife in the sun.", "Chill the onion first and use a sharp knife.", 1),
]

HELLASWAG = [
    ("A man is standing on a ladder next to a house. He", ["paints the wall with a roller.", "swims across the ladder.", "eats the house for lunch.", "folds the sky into a box."], 0),
    ("A woman puts a pan on the stove and pours oil into it. She", ["sings to the pan until it freezes.", "cracks two eggs into the hot pan.", "throws the stove out of the window.", "plants the pan in the garden."], 1),
    ("A boy kicks a ball toward the goal. The goalkeeper", ["reads a book under the net.", "turns the ball into a bird.", "dives and catches the ball.", "paints the grass blue."], 2),
    ("A girl sits at a piano and opens the lid. She", ["eats the keys one by one.", "pours water into the strings.", "mails the piano to a friend.", "begins to play a slow song."], 3),
    ("A chef slices a tomato on a wooden board. He", ["puts the slices on a plate.", "drives the tomato to work.", "teaches the board to swim.", "hangs the knife on the moon."], 0),
    ("Two people carry a canoe to the edge of a lake. They", ["bake the canoe in an oven.", "put it in the water and climb in.", "fold the lake in half.", "sell the water to a bird."], 1),
    ("A man holds a dog's leash and opens the front door. He", ["turns the door into a sandwich.", "asks the leash for directions.", "walks the dog down the street.", "puts the dog in the washing machine."], 2),
    ("A woman ties her running shoes in the park. She", ["plants the shoes in the soil.", "throws the park into a river.", "reads the shoes a story.", "starts jogging along the path."], 3),
    ("A child blows out the candles on a birthday cake. Everyone", ["claps and cheers.", "turns into a candle.", "eats the table.", "flies home through the ceiling."], 0),
    ("A man fills a bucket with soapy water next to his car. He", ["drinks the bucket.", "washes the car with a sponge.", "parks the bucket on the roof.", "paints the soap red."], 1),
    ("A woman opens an umbrella as it starts to rain. She", ["swallows the umbrella.", "turns the rain into sand.", "walks on, staying dry.", "hands the rain to a stranger."], 2),
    ("A student opens a notebook at the desk. She", ["fries the notebook in butter.", "throws the desk at the door.", "mails the pen to the moon.", "writes notes from the lecture."], 3),
    ("A gardener kneels next to a flower bed with a trowel. He", ["digs a small hole for a plant.", "eats the trowel slowly.", "sings the flowers to sleep in a car.", "paints the sun green."], 0),
    ("A man hangs a picture frame on the wall. He", ["hammers the wall into the floor.", "checks that it is level.", "feeds the frame to the cat.", "turns the picture into soup."], 1),
    ("A barber picks up scissors and a comb. He", ["combs the scissors.", "cuts the chair in half.", "trims the customer's hair.", "throws the comb into the sea."], 2),
    ("A woman pours coffee into a mug. She", ["plants the mug in a pot.", "pours the mug into the coffee.", "irons the coffee flat.", "adds milk and takes a sip."], 3),
]

ARC_CHALLENGE = [
    ("Which property of a mineral can be determined just by looking at it?", ["luster", "mass", "weight", "hardness"], "A"),
    ("A student heats a pot of water. Which change shows that energy was added?", ["the water gets colder", "the water starts to boil", "the pot gets lighter", "the water turns to ice"], "B"),
    ("Which gas do plants take in from the air to make food?", ["oxygen", "nitrogen", "carbon dioxide", "helium"], "C"),
    ("Why does a metal spoon feel colder than a wooden spoon at the same temperature?", ["metal is heavier", "wood is shinier", "wood is always warmer", "metal conducts heat away faster"], "D"),
    ("Which of these is a renewable resource?", ["wind", "coal", "oil", "natural gas"], "A"),
    ("What causes the seasons on Earth?", ["the distance to the Moon", "the tilt of Earth's axis", "the speed of the wind", "the size of the oceans"], "B"),
    ("Which organ pumps blood through the human body?", ["lungs", "liver", "heart", "stomach"], "C"),
    ("A ball rolls down a ramp and speeds up. Which force causes this?", ["magnetism", "friction", "air pressure", "gravity"], "D"),
    ("Which process turns liquid water into water vapor?", ["evaporation", "condensation", "freezing", "melting"], "A"),
    ("Which tool is best for measuring the volume of a liquid?", ["a ruler", "a graduated cylinder", "a balance", "a thermometer"], "B"),
    ("What is the main source of energy for Earth's water cycle?", ["the Moon", "volcanoes", "the Sun", "lightning"], "C"),
    ("Which is an inherited trait in animals?", ["a scar", "a learned trick", "a broken bone", "eye color"], "D"),
    ("Which layer of Earth is made of liquid metal?", ["outer core", "crust", "mantle", "atmosphere"], "A"),
    ("Which change is a chemical change?", ["ice melting", "wood burning", "glass breaking", "paper folding"], "B"),
    ("Which object in the solar system gives off its own light?", ["the Moon", "Mars", "the Sun", "a comet's rock"], "C"),
    ("A food chain starts with which kind of organism?", ["a predator", "a decomposer", "a consumer", "a producer"], "D"),
]

ARC_EASY = [
    ("Which of these is a liquid at room temperature?", ["water", "rock", "wood", "iron"], "A"),
    ("What do bees collect from flowers?", ["sand", "nectar", "salt", "leaves"], "B"),
    ("Which sense do people use to hear?", ["sight", "touch", "hearing", "taste"], "C"),
    ("What does a thermometer measure?", ["length", "weight", "time", "temperature"], "D"),
    ("Which animal lays eggs?", ["chicken", "dog", "cow", "horse"], "A"),
    ("What shape is the Earth?", ["flat", "round", "square", "a triangle"], "B"),
    ("Which is the closest star to Earth?", ["Sirius", "Polaris", "the Sun", "Vega"], "C"),
    ("What do plants need to grow?", ["plastic", "noise", "darkness only", "water and light"], "D"),
    ("Which material is attracted to a magnet?", ["iron", "glass", "paper", "rubber"], "A"),
    ("What happens to water when it freezes?", ["it boils", "it becomes ice", "it turns to gas", "it disappears"], "B"),
    ("Which body part helps a fish breathe?", ["fins", "scales", "gills", "tail"], "C"),
    ("What season comes after winter?", ["summer", "autumn", "winter again", "spring"], "D"),
    ("Which of these gives us light at night?", ["a lamp", "a spoon", "a pillow", "a shoe"], "A"),
    ("How many legs does an insect have?", ["four", "six", "eight", "ten"], "B"),
    ("Which planet do we live on?", ["Mars", "Venus", "Earth", "Jupiter"], "C"),
    ("Which is used to cut paper?", ["a cup", "a sock", "a spoon", "scissors"], "D"),
]

BOOLQ = [
    ("Water boils at 100 degrees Celsius at sea level.", "does water boil at 100 degrees celsius at sea level", 1),
    ("Penguins are birds that cannot fly but are excellent swimmers.", "can penguins fly", 0),
    ("The Pacific is the largest ocean on Earth.", "is the pacific the largest ocean", 1),
    ("Spiders have eight legs, while insects have six.", "do spiders have six legs", 0),
    ("The Moon orbits the Earth about once every 27 days.", "does the moon orbit the earth", 1),
    ("Bats are mammals, and most species are active at night.", "are bats a kind of bird", 0),
    ("Copper is a good conductor of electricity and is used in wires.", "is copper used in electrical wires", 1),
    ("Mount Everest is the highest mountain above sea level.", "is mount everest the lowest mountain", 0),
    ("Tomatoes are botanically fruits, although they are cooked as vegetables.", "is a tomato a fruit", 1),
    ("The human heart has four chambers.", "does the human heart have two chambers", 0),
    ("Honey does not spoil easily because it has little water and is acidic.", "does honey keep for a long time", 1),
    ("Sound cannot travel through a vacuum because there is no medium.", "can sound travel through a vacuum", 0),
    ("The Great Wall of China is more than 20,000 kilometres long.", "is the great wall of china very long", 1),
    ("Whales breathe air through a blowhole on top of their heads.", "do whales breathe water through gills", 0),
    ("Venus is the hottest planet in the solar system.", "is venus the hottest planet", 1),
    ("Glass is made mostly from sand that is melted at high temperature.", "is glass made from wood", 0),
]


def task_docs() -> dict[str, list[dict]]:
    labels = ["A", "B", "C", "D"]
    docs = {
        "winogrande": [
            {"sentence": s, "option1": o1, "option2": o2, "answer": a} for s, o1, o2, a in WINOGRANDE
        ],
        "piqa": [{"goal": g, "sol1": s1, "sol2": s2, "label": y} for g, s1, s2, y in PIQA],
        "hellaswag": [
            {"ind": i, "ctx": c, "endings": e, "label": str(y)} for i, (c, e, y) in enumerate(HELLASWAG)
        ],
        "arc_challenge": [
            {"id": f"local_challenge_{i}", "question": q, "choices": {"text": t, "label": labels},
             "answerKey": k}
            for i, (q, t, k) in enumerate(ARC_CHALLENGE)
        ],
        "arc_easy": [
            {"id": f"local_easy_{i}", "question": q, "choices": {"text": t, "label": labels},
             "answerKey": k}
            for i, (q, t, k) in enumerate(ARC_EASY)
        ],
        "boolq": [{"passage": p, "question": q, "label": y} for p, q, y in BOOLQ],
    }
    for name, d in docs.items():
        assert len(d) == N_DOCS, (name, len(d))
    return docs


# --------------------------------------------------------------------------- tasks
ACC = """\
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""
ACC_NORM = ACC + """\
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
"""

# Prompt templates mirror lm-eval's built-in tasks (arc, piqa, boolq verbatim; hellaswag
# without its preprocessing; winogrande as "prefix up to the blank" + "option + rest",
# written in Jinja instead of the built-in's Python partial scoring).
TASK_BODIES = {
    "winogrande": (
        "validation",
        """\
doc_to_text: "{{ sentence[:sentence.index('_')].strip() }}"
doc_to_choice: "{{ [option1 + sentence[sentence.index('_') + 1:], option2 + sentence[sentence.index('_') + 1:]] }}"
doc_to_target: "{{ answer | int - 1 }}"
""",
        ACC,
    ),
    "piqa": (
        "validation",
        """\
doc_to_text: "Question: {{goal}}\\nAnswer:"
doc_to_target: label
doc_to_choice: "{{[sol1, sol2]}}"
""",
        ACC_NORM,
    ),
    "hellaswag": (
        "validation",
        """\
doc_to_text: "{{ctx}}"
doc_to_target: "{{label}}"
doc_to_choice: "{{endings}}"
""",
        ACC_NORM,
    ),
    "arc_challenge": (
        "test",
        """\
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_target: "{{choices.label.index(answerKey)}}"
doc_to_choice: "{{choices.text}}"
""",
        ACC_NORM,
    ),
    "arc_easy": (
        "test",
        """\
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_target: "{{choices.label.index(answerKey)}}"
doc_to_choice: "{{choices.text}}"
""",
        ACC_NORM,
    ),
    "boolq": (
        "validation",
        """\
doc_to_text: "{{passage}}\\nQuestion: {{question}}?\\nAnswer:"
doc_to_target: label
doc_to_choice: ["no", "yes"]
""",
        ACC,
    ),
}


def write_tasks(task_dir: Path) -> None:
    task_dir.mkdir(parents=True)
    for name, docs in task_docs().items():
        split, body, metrics = TASK_BODIES[name]
        data = task_dir / f"{name}.jsonl"
        with data.open("w") as f:
            for d in docs:
                f.write(json.dumps(d) + "\n")
        yaml = (
            f"task: {name}\n"
            "dataset_path: json\n"
            "dataset_name: null\n"
            "dataset_kwargs:\n"
            "  data_files:\n"
            f"    {split}: {json.dumps(str(data))}\n"
            "output_type: multiple_choice\n"
            f"{split}_split: {split}\n"
            f"{body}{metrics}"
            "metadata:\n"
            "  version: 1.0\n"
            "  note: local offline copy with 16 hand-written documents (asa-analyze test fixture)\n"
        )
        (task_dir / f"{name}.yaml").write_text(yaml)


# --------------------------------------------------------------------------- models
def write_model(model_dir: Path, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(TOKENIZER_JSON),
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    tok.model_max_length = 512
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)


# --------------------------------------------------------------------------- lm_eval
def lm_eval_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "lm_eval"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "lm_eval"]


def run_lm_eval(model_dir: Path, task_dir: Path, out: Path, log: Path) -> Path:
    cmd = lm_eval_cmd() + [
        "--model", "hf",
        "--model_args", f"pretrained={model_dir},dtype=float32",
        "--device", "cpu",
        "--tasks", ",".join(TASKS),
        "--include_path", str(task_dir),
        "--output_path", str(out),
        "--batch_size", "4",
        "--seed", "1234",
    ]
    env = dict(os.environ, **OFFLINE_ENV)
    print("+", " ".join(cmd), flush=True)
    with log.open("w") as f:
        p = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
    text = log.read_text()
    if p.returncode == 0:
        # lm-eval 0.4.13 logs one line per built-in task that an include path overrides.
        lines = [ln for ln in text.splitlines() if "overrides existing task" in ln]
        overridden = [t for t in TASKS if any(f"Task '{t}' from" in ln for ln in lines)]
        print(f"  local tasks overriding built-ins (from lm_eval's log): {overridden}", flush=True)
    if p.returncode != 0:
        sys.stderr.write(text[-6000:])
        raise SystemExit(f"lm_eval failed with status {p.returncode}")
    found = sorted(glob.glob(str(out / "**" / "results_*.json"), recursive=True))
    if len(found) != 1:
        sys.stderr.write(text[-6000:])
        raise SystemExit(f"expected one results_*.json under {out}, found {found}")
    return Path(found[0])


def check(res: dict, label: str) -> None:
    """The run must have used the local tasks: six tasks, 16 documents each."""
    missing = [t for t in TASKS if t not in res.get("results", {})]
    assert not missing, (label, missing, list(res.get("results", {})))
    for t in TASKS:
        n = res.get("n-samples", {}).get(t, {})
        assert n.get("effective") == N_DOCS, (label, t, n)
        r = res["results"][t]
        assert "acc,none" in r, (label, t, r)
        assert ("acc_norm,none" in r) == (t not in ("winogrande", "boolq")), (label, t, r)


def main() -> None:
    t0 = time.time()
    if not TOKENIZER_JSON.exists():
        raise SystemExit(f"missing {TOKENIZER_JSON}")
    import lm_eval  # noqa: F401  (fails early when run with the wrong python)
    from importlib.metadata import version

    versions = {p: version(p) for p in ("lm_eval", "torch", "transformers", "datasets")}
    print("versions:", versions, flush=True)

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    dropped_any: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    shutil.rmtree(WORK_DIR, ignore_errors=True)
    WORK_DIR.mkdir(parents=True)
    tmp = WORK_DIR
    try:
        task_dir = tmp / "tasks"
        write_tasks(task_dir)
        for label, seed in MODELS:
            model_dir = tmp / "models" / label
            write_model(model_dir, seed)
            result_path = run_lm_eval(model_dir, task_dir, tmp / "out" / label, tmp / f"{label}.log")
            res = json.loads(result_path.read_text())
            check(res, label)
            dest = OUT_DIR / f"{label}.json"
            dropped = []
            if result_path.stat().st_size <= MAX_BYTES:
                shutil.copyfile(result_path, dest)  # lm-eval's bytes, untouched
            else:
                for k in DROP_IF_LARGE:
                    if k in res:
                        del res[k]
                        dropped.append(k)
                dest.write_text(json.dumps(res, indent=2, ensure_ascii=False) + "\n")
            dropped_any[label] = dropped
            sizes[label] = dest.stat().st_size
            print(f"wrote {dest} ({sizes[label]} bytes, dropped {dropped or 'nothing'})", flush=True)
    finally:
        shutil.rmtree(WORK_DIR, ignore_errors=True)

    dropped_txt = "; ".join(
        f"`{label}.json`: " + (", ".join(f"`{k}`" for k in d) if d else "nothing")
        for label, d in dropped_any.items()
    )
    readme = textwrap.dedent(f"""\
        # lm-eval result fixtures

        `baseline.json` and `asa.json` are real lm-evaluation-harness result files
        (`results_*.json`, lm-eval {versions['lm_eval']}, torch {versions['torch']},
        transformers {versions['transformers']}, datasets {versions['datasets']}, CPU, offline),
        written by `tools/make_lm_eval_fixture.py` (see its docstring for how to run it).

        - Models: two tiny random `LlamaForCausalLM` (hidden 32, 2 layers, 4 heads / 2 kv
          heads, SmolLM2's byte-level BPE tokenizer, vocab 49152), seeds 1 (`baseline`) and
          2 (`asa`), saved with `save_pretrained`; the accuracies are near chance.
        - Command: `lm_eval --model hf --model_args pretrained=DIR,dtype=float32 --device cpu
          --tasks {','.join(TASKS)} --include_path TASKS --output_path OUT --batch_size 4 --seed 1234`.
        - Tasks: local YAML tasks with the real names ({', '.join(TASKS)}) that override the
          built-in ones through `--include_path`, each over 16 hand-written documents in a
          local JSONL file, prompts and fields as in the real tasks. winogrande and boolq
          report `acc` / `acc_stderr` only; the other four also `acc_norm` / `acc_norm_stderr`.
        - Dropped keys (only if a file exceeded {MAX_BYTES // 1000} KB): {dropped_txt}.
          Files not over the limit are lm-eval's bytes, unedited (no trailing newline, as
          lm-eval writes them). `date` and `total_evaluation_time_seconds` change on a rerun
          (`pretty_env_info` too on another machine); `results` does not (fixed seeds, float32 on CPU, one thread). Paths in the files point into
          the script's deleted work folder `{WORK_DIR}`.
        """)
    (OUT_DIR / "README.md").write_text(readme)
    print(f"sizes: {sizes}; wall time {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
