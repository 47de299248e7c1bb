"""`pstrain infer-schema --data csv:PATH`: one pass over a CSV file (with a header, or without
one: columns c1 to cN) or Criteo's TSV (criteo:PATH) prints a schema of feature columns (JSON on
stdout, or --out FILE) that reads back as the schema it is, and on stderr one "# column: why"
line per column. Quoted fields with commas, missing values, string and integer-coded columns,
identifiers and gzip files go through it; every bad input is refused with exit code 2 and a
message that names the file, the line or the column.
"""

import gzip
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import BINARY  # noqa: E402


def run(*argv):
    assert BINARY and os.path.exists(BINARY), "PSTRAIN_BINARY=%r is not built" % BINARY
    return subprocess.run([BINARY, "infer-schema"] + list(argv), capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def passengers(rows=40):
    """A Titanic-like table: a quoted name with a comma, strings, missing ages, integer codes."""
    lines = ["survived,name,sex,age,pclass,fare,cabin"]
    for i in range(rows):
        age = "" if i % 8 == 0 else "%g" % (18 + (i * 7) % 50 + 0.5 * (i % 2))
        lines.append('%d,"Passenger %d, Mr. ""%d""",%s,%s,%d,%.2f,NA'
                     % (i % 3 == 0, i, i, "female" if i % 2 else "male", age, 1 + i % 3,
                        7.25 + 3.1 * i))
    return "\n".join(lines) + "\n"


def kinds(schema):
    return {c["name"]: (c["type"], c.get("encoding") or c.get("normalizer"))
            for c in schema["columns"]}


def test_a_table_of_strings_codes_and_numbers_gets_a_schema_and_the_reasons(tmp_path):
    data = tmp_path / "titanic.csv"
    data.write_text(passengers())
    r = run("--data", "csv:%s" % data)
    assert r.returncode == 0, r.stderr
    schema = json.loads(r.stdout)
    assert schema["label"] == "survived" and schema["task"] == "classification"
    assert kinds(schema) == {"sex": ("categorical", "vocabulary"),
                             "age": ("numeric", "standardize"),
                             "pclass": ("categorical", "vocabulary"),
                             "fare": ("numeric", "standardize")}
    assert [c for c in schema["columns"] if c["name"] == "age"][0]["missing_indicator"] is True
    reasons = [l for l in r.stderr.splitlines() if l.startswith("# ")]
    assert len(reasons) == 7, r.stderr
    assert "name: text with a different value in every row (an identifier): left out" in r.stderr
    assert "cabin: every value is missing: left out" in r.stderr
    assert "age: numbers with" in r.stderr and "5 missing: filled with the mean and flagged" in r.stderr
    assert "pclass: integers with 3 distinct values" in r.stderr
    assert "survived (label): 2 distinct integers: classification" in r.stderr

    # --out writes the same schema, which reads back as itself; a gzip copy gives it too.
    out = tmp_path / "schema.json"
    assert run("--data", "csv:%s" % data, "--out", str(out)).returncode == 0
    assert json.loads(out.read_text()) == schema
    packed = tmp_path / "titanic.csv.gz"
    with gzip.open(packed, "wt") as f:
        f.write(passengers())
    assert json.loads(run("--data", "csv:%s" % packed).stdout) == schema


def test_the_label_can_be_named_and_a_non_integer_label_is_regression(tmp_path):
    data = tmp_path / "houses.csv"
    data.write_text("rooms;price;district\n" + "".join(
        "%d;%.1f;d%d\n" % (2 + i % 5, 100 + 13.7 * i, i % 4) for i in range(30)))
    r = run("--data", "csv:%s" % data, "--label", "price", "--delimiter", ";")
    assert r.returncode == 0, r.stderr
    schema = json.loads(r.stdout)
    assert schema["label"] == "price" and schema["task"] == "regression"
    assert kinds(schema) == {"rooms": ("categorical", "vocabulary"),
                             "district": ("categorical", "vocabulary")}
    assert "price (label): numbers that are not all integers: regression" in r.stderr


def test_a_file_whose_first_line_is_all_numbers_has_no_header_and_columns_c1_to_cn(tmp_path):
    """Its first line is a row (a missing value among numbers); the label is the first column,
    or the one named by its place."""
    data = tmp_path / "rows.csv"
    data.write_text("".join("%d,%.2f,NA,%d\n" % (i % 2, 0.5 * i, i % 4) if i == 0 else
                            "%d,%.2f,%.1f,%d\n" % (i % 2, 0.5 * i, 1.5 * i, i % 4)
                            for i in range(30)))
    r = run("--data", "csv:%s" % data)
    assert r.returncode == 0, r.stderr
    schema = json.loads(r.stdout)
    assert schema["label"] == "c1" and schema["task"] == "classification", schema
    assert set(kinds(schema)) == {"c2", "c3", "c4"}, schema
    r = run("--data", "csv:%s" % data, "--label", "c3")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["label"] == "c3"
    assert "c3 (label)" in r.stderr, r.stderr


def test_criteos_tsv_has_no_header_and_its_own_column_names(tmp_path):
    """criteo:PATH: tab-separated, no header; the label, I1 to I13 (counts) and C1 to C26 (hex
    ids, categorical)."""
    data = tmp_path / "clicks.tsv"
    gen = subprocess.run([BINARY, "gen-criteo", "--rows", "400", "--out", str(data)],
                         capture_output=True, text=True, timeout=60)
    assert gen.returncode == 0, gen.stderr
    r = run("--data", "criteo:%s" % data)
    assert r.returncode == 0, r.stderr
    schema = json.loads(r.stdout)
    assert schema["label"] == "label" and schema["task"] == "classification", schema
    names = {"I%d" % i for i in range(1, 14)} | {"C%d" % i for i in range(1, 27)}
    got = kinds(schema)
    assert set(got) <= names and len(got) > 30, got
    assert all(got[c][0] == "categorical" for c in got if c.startswith("C")), got
    assert any(got[c][0] == "numeric" for c in got if c.startswith("I")), got


def test_bad_input_is_refused_with_what_is_wrong(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text("y,a\n1,2\n0,3\n")
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("y,a\n1,2\n0\n")
    quote = tmp_path / "quote.csv"
    quote.write_text('y,a\n1,"open\n')
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    cases = [
        (["--data", "csv:%s" % good, "--label", "z"], 'no column "z" (its header: y,a)'),
        (["--data", str(good)], "infer-schema reads csv:PATH"),
        (["--data", "csv:%s" % ragged], "%s:3: 1 fields where the header has 2" % ragged),
        (["--data", "csv:%s" % quote], "%s:2: field 2: a quote that is not closed" % quote),
        (["--data", "csv:%s" % empty], "%s: empty file" % empty),
        (["--data", "csv:%s" % (tmp_path / "none.csv")], "none.csv"),
    ]
    for argv, message in cases:
        r = run(*argv)
        unreadable = "none.csv" in message
        assert r.returncode == (1 if unreadable else 2) and r.stdout == "", (argv, r)
        assert r.stderr.startswith("pstrain infer-schema: error: "), (argv, r.stderr)
        assert message in r.stderr, (argv, r.stderr)
    repeated = tmp_path / "repeated.csv"
    repeated.write_text("y,a,a\n1,2,3\n")
    r = run("--data", "csv:%s" % repeated)
    assert r.returncode == 2 and 'names column "a" twice' in r.stderr, r.stderr
    header_only = tmp_path / "header.csv"
    header_only.write_text("y,a\n")
    r = run("--data", "csv:%s" % header_only)
    assert r.returncode == 2 and "no row to infer a schema from" in r.stderr, r.stderr
