#!/usr/bin/env python3
"""Write the dataset fixtures of tests/fixtures/datasets/ with pyarrow, as verl and Hugging Face
`datasets` write them, plus what pyarrow itself reads back from each (`*.expected.jsonl`, one
JSON object per row), which rollbox's reader must reproduce.

  verl-gsm8k.parquet  verl's RL layout (examples/data_preprocess/gsm8k.py): `data_source`,
                      `prompt` (a list of chat messages), `ability`, `reward_model`
                      {`style`, `ground_truth`}, `extra_info` {split, index, answer, question};
                      snappy (pyarrow's default), two row groups.
  hf-gsm8k.parquet    a `datasets` export of GSM8K's own columns (`question`, `answer` = the
                      whole solution ending in `#### n`), zstd.
  hf-gsm8k.json       the same rows as `Dataset.to_json(lines=False)` writes them (a JSON array).

Run: python3 -m venv v && v/bin/pip install pyarrow==21.0.0 && v/bin/python scripts/make_dataset_fixtures.py
"""
import json
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "datasets"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'

GSM8K = [
    ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?",
     "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"),
    ("Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?",
     "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10"),
    ("Betty is saving money for a new wallet which costs $100. Betty has only half of the money she needs. Her parents decided to give her $15 for that purpose, and her grandparents twice as much as her parents. How much more money does Betty need to buy the wallet?",
     "In the beginning, Betty has only 100 / 2 = $<<100/2=50>>50.\nBetty's grandparents gave her 15 * 2 = $<<15*2=30>>30.\nThis means, Betty needs 100 - 50 - 30 - 15 = $<<100-50-30-15=5>>5 more.\n#### 5"),
]


def expected(table, path):
    with open(path, "w", encoding="utf-8") as f:
        for row in pq.read_table(table).to_pylist():
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    verl = []
    for i, (q, a) in enumerate(GSM8K):
        verl.append({
            "data_source": "openai/gsm8k",
            "prompt": [{"content": q + " " + INSTRUCTION, "role": "user"}],
            "ability": "math",
            "reward_model": {"ground_truth": a.split("#### ")[-1], "style": "rule"},
            "extra_info": {"answer": a, "index": i, "question": q, "split": "train"},
        })
    path = OUT / "verl-gsm8k.parquet"
    pq.write_table(pa.Table.from_pylist(verl), path, row_group_size=2)
    expected(path, OUT / "verl-gsm8k.expected.jsonl")

    hf = [{"question": q, "answer": a} for q, a in GSM8K]
    path = OUT / "hf-gsm8k.parquet"
    pq.write_table(pa.Table.from_pylist(hf), path, compression="zstd")
    expected(path, OUT / "hf-gsm8k.expected.jsonl")
    with open(OUT / "hf-gsm8k.json", "w", encoding="utf-8") as f:
        json.dump(hf, f, ensure_ascii=False, indent=2)


if __name__ == "__main__":
    main()
