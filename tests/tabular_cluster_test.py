"""Built-in models on CSV tables through feature columns (`pstrain launch --schema auto|FILE`):
real public data bundled with scikit-learn (Debian's python3-sklearn), with string labels, and a
table with string categorical columns, each compared with scikit-learn on the same split; and
the bad inputs a schema meets, each refused naming the file, the line or the column.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import BINARY  # noqa: E402

sklearn = pytest.importorskip("sklearn")  # a test package of scripts/setup.sh
from sklearn.datasets import (dump_svmlight_file, load_breast_cancer, load_diabetes,  # noqa
                              load_digits, load_wine)
from sklearn.linear_model import LogisticRegression, Ridge  # noqa: E402
from sklearn.metrics import accuracy_score, roc_auc_score  # noqa: E402
from sklearn.model_selection import KFold, StratifiedKFold  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, StandardScaler  # noqa: E402


def write_csv(path, header, rows):
    with open(path, "w") as f:
        if header is not None:  # None: a file of rows only
            f.write(",".join(header) + "\n")
        for r in rows:
            f.write(",".join(str(v) for v in r) + "\n")


def folds_to_csv(tmp_path, X, names, header, folds=5):
    """Stratified folds of (X, names), each written as train.csv and test.csv with the label (a
    name) first: yields (Xtrain, Xtest, ytrain, ytest) once the files are written. Test sets of
    a few dozen rows move by whole rows between runs, so models are compared on every row."""
    y = np.array(names)
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=7).split(X, y):
        for name, rows in (("train", train), ("test", test)):
            write_csv(tmp_path / ("%s.csv" % name), header,
                      [[y[r]] + ["%.17g" % v for v in X[r]] for r in rows])
        yield X[train], X[test], y[train], y[test]


def run_cluster(tmp_path, *flags):
    assert BINARY and os.access(BINARY, os.X_OK), "PSTRAIN_BINARY=%r is not built" % BINARY
    argv = [BINARY, "launch", "--ps", "1", "--workers", "2", "--log_dir",
            str(tmp_path / "logs")] + list(flags)
    return subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def launch(tmp_path, *flags):
    return run_cluster(tmp_path, "--data", "csv:%s" % (tmp_path / "train.csv"),
                       "--test_data", "csv:%s" % (tmp_path / "test.csv"), *flags)


# What the chief logs when it decays an MLP's rate for a regression.
COSINE_FOR_REGRESSION = "--lr_schedule cosine: an mlp's regression decays its rate"


def chief_log(tmp_path):
    return (tmp_path / "logs" / "chief-0.log").read_text()


def result(r):
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["tasks_applied_once"], out  # every task's batches on every PS, exactly once
    return out


def test_a_linear_model_on_columns_of_any_scale_matches_logistic_regression(tmp_path):
    """30 numeric columns whose scales run from 0.05 to 2500 (Wisconsin breast cancer), string
    labels: standardized by the inferred schema, the linear model's AUC over 5 folds is within
    0.01 of scikit-learn's LogisticRegression's and its log loss below the base rate's."""
    data = load_breast_cancer()
    names = [data.target_names[t] for t in data.target]
    header = ["diagnosis"] + [n.replace(" ", "_") for n in data.feature_names]
    got, reference = [], []
    for Xtr, Xte, ytr, yte in folds_to_csv(tmp_path, data.data, names, header):
        scaler = StandardScaler().fit(Xtr)
        lr = LogisticRegression(max_iter=1000).fit(scaler.transform(Xtr), ytr)
        # pstrain's class 1 is the second class in byte order: "malignant".
        scores = lr.predict_proba(scaler.transform(Xte))[:, list(lr.classes_).index("malignant")]
        reference.append(roc_auc_score(yte == "malignant", scores))
        r = result(launch(tmp_path, "--model", "linear", "--schema", "auto"))
        assert r["test_examples"] == len(yte), r
        p = np.mean(ytr == "malignant")
        base = -np.mean(np.where(yte == "malignant", np.log(p), np.log(1 - p)))
        assert r["log_loss"] < base, (r, base)
        q = np.mean(yte == "malignant")  # the JSON's base: the held-out rows' own rate
        assert abs(r["base_log_loss"] + q * np.log(q) + (1 - q) * np.log(1 - q)) < 1e-3, r
        got.append(r["auc"])
    assert np.mean(got) >= np.mean(reference) - 0.01, (got, reference)


def test_a_libsvm_file_goes_through_an_inferred_schema_as_numeric_columns(tmp_path):
    """Wisconsin breast cancer as LibSVM files (zeros left out, as scikit-learn writes them):
    `infer-schema` names its columns label and f1 to f30, and the linear model through the
    inferred schema (standardized) comes within 0.01 AUC of LogisticRegression over 3 folds with
    its log loss below the base rate's."""
    data = load_breast_cancer()
    X, y = data.data, data.target
    got, reference = [], []
    train_svm, test_svm = tmp_path / "train.svm", tmp_path / "test.svm"
    for train, test in StratifiedKFold(3, shuffle=True, random_state=7).split(X, y):
        dump_svmlight_file(X[train], y[train], str(train_svm), zero_based=False)
        dump_svmlight_file(X[test], y[test], str(test_svm), zero_based=False)
        scaler = StandardScaler().fit(X[train])
        lr = LogisticRegression(max_iter=1000).fit(scaler.transform(X[train]), y[train])
        scores = lr.predict_proba(scaler.transform(X[test]))[:, 1]
        reference.append(roc_auc_score(y[test], scores))
        r = result(run_cluster(tmp_path, "--model", "linear", "--schema", "auto",
                               "--data", "libsvm:%s" % train_svm,
                               "--test_data", "libsvm:%s" % test_svm))
        assert r["test_examples"] == len(test), r
        assert r["log_loss"] < r["base_log_loss"], r
        got.append(r["auc"])
    assert np.mean(got) >= np.mean(reference) - 0.01, (got, reference)
    inferred = subprocess.run([BINARY, "infer-schema", "--data", "libsvm:%s" % train_svm],
                              capture_output=True, text=True, timeout=60)
    assert inferred.returncode == 0, inferred.stderr
    schema = json.loads(inferred.stdout)
    assert schema["label"] == "label", schema
    assert [c["name"] for c in schema["columns"]] == ["f%d" % i for i in range(1, 31)], schema
    # Sparse indices up to 20,000 are not a table of columns: the chief refuses the job before
    # it trains, naming the file and the way to train on it.
    sparse = tmp_path / "sparse.svm"
    sparse.write_text("1 3:1 20000:1\n0 7:1\n")
    r = run_cluster(tmp_path, "--model", "linear", "--schema", "auto",
                    "--data", "libsvm:%s" % sparse, "--test_data", "libsvm:%s" % sparse)
    assert r.returncode != 0, r.stdout
    assert "%s: feature indices up to 20000" % sparse in r.stderr, r.stderr[-3000:]
    assert "train on it without --schema" in r.stderr, r.stderr[-3000:]


def mlp_against_scikit_learn(tmp_path, X, labels, header, folds):
    """The MLP's accuracy with an inferred schema and scikit-learn's MLPClassifier's on
    standardized columns, each over the same folds: (pstrain's, scikit-learn's) per fold."""
    got, reference = [], []
    for Xtr, Xte, ytr, yte in folds_to_csv(tmp_path, X, labels, header, folds):
        scaler = StandardScaler().fit(Xtr)
        mlp = MLPClassifier(hidden_layer_sizes=(64,), max_iter=2000, random_state=1)
        reference.append(accuracy_score(yte, mlp.fit(scaler.transform(Xtr), ytr).predict(
            scaler.transform(Xte))))
        r = result(launch(tmp_path, "--model", "mlp", "--schema", "auto"))
        assert r["test_examples"] == len(yte), r
        assert 0 < r["macro_f1"] <= 1 and "auc" not in r, r
        assert COSINE_FOR_REGRESSION not in chief_log(tmp_path)  # a classifier's rate is constant
        got.append(r["test_accuracy"])
    return got, reference


def test_an_mlp_on_three_named_classes_matches_scikit_learn(tmp_path):
    """Wine: 13 numeric columns, three classes named by strings; the MLP's accuracy over 5 folds
    is within 0.01 of scikit-learn's MLPClassifier on standardized columns, or better."""
    data = load_wine()
    names = ["cultivar_%s" % data.target_names[t] for t in data.target]
    got, reference = mlp_against_scikit_learn(
        tmp_path, data.data, names, ["cultivar"] + list(data.feature_names), 5)
    assert np.mean(got) >= np.mean(reference) - 0.01, (got, reference)


def test_an_mlp_on_integer_pixels_and_ten_classes_matches_scikit_learn(tmp_path):
    """Digits: 64 integer columns (0..16) and labels 0..9, in files without a header (their
    first line is all numbers: columns c1 to c65, the label the first). Inferred for the MLP,
    the integers stay numbers (standardized); its accuracy over 3 folds is within 0.01 of
    scikit-learn's MLPClassifier, or better."""
    data = load_digits()
    got, reference = mlp_against_scikit_learn(tmp_path, data.data, list(data.target), None, 3)
    assert np.mean(got) >= np.mean(reference) - 0.01, (got, reference)


def test_every_model_regresses_a_numeric_target_within_five_percent_of_ridge(tmp_path):
    """Diabetes: 10 numeric columns of scales 1 to 300 and a progression score of 25..346,
    inferred a regression target. With default flags (--epochs auto), each model's RMSE over 5
    folds is within 5% of scikit-learn's Ridge on standardized columns (the MLP's by the cosine
    decay it takes for a regression: at a constant rate it was 6-10% behind), and its RMSE and
    MAE agree with those of its own predictions' order of magnitude (MAE <= RMSE)."""
    data = load_diabetes(scaled=False)
    X, y = data.data, data.target
    header = ["progression"] + list(data.feature_names)
    models = ["linear", "mlp", "wide_deep"]
    got, reference = {m: [] for m in models}, []
    for train, test in KFold(5, shuffle=True, random_state=7).split(X):
        for name, rows in (("train", train), ("test", test)):
            write_csv(tmp_path / ("%s.csv" % name), header,
                      [["%.17g" % y[r]] + ["%.17g" % v for v in X[r]] for r in rows])
        scaler = StandardScaler().fit(X[train])
        ridge = Ridge(alpha=1.0).fit(scaler.transform(X[train]), y[train])
        error = ridge.predict(scaler.transform(X[test])) - y[test]
        reference.append(np.sqrt(np.mean(error ** 2)))
        for m in models:
            r = result(launch(tmp_path, "--model", m, "--schema", "auto"))
            assert r["test_examples"] == len(test) and 0 < r["mae"] <= r["rmse"], r
            assert "auc" not in r and "test_accuracy" not in r, r
            got[m].append(r["rmse"])
            if m == "mlp":
                assert COSINE_FOR_REGRESSION in chief_log(tmp_path)
    for m in models:
        assert np.mean(got[m]) <= 1.05 * np.mean(reference), (m, got[m], reference)
    # The same target as a written schema's regression, named by --label for an inferred one.
    write_csv(tmp_path / "train.csv", header[1:] + header[:1],
              [["%.17g" % v for v in X[r]] + ["%.17g" % y[r]] for r in train])
    write_csv(tmp_path / "test.csv", header[1:] + header[:1],
              [["%.17g" % v for v in X[r]] + ["%.17g" % y[r]] for r in test])
    r = result(launch(tmp_path, "--model", "linear", "--schema", "auto", "--label",
                      "progression"))
    assert r["rmse"] <= 1.05 * reference[-1], (r, reference)


def test_a_checkpoint_holds_its_transform_and_a_restore_over_other_statistics_is_refused(
        tmp_path):
    """The schema and the training rows' statistics are saved in the manifest; a restore whose
    data gives the same ones trains on, one whose statistics differ is refused naming where."""
    header = ["bought", "city", "device", "visits", "spend"]
    rows = shoppers(600, 4)
    write_csv(tmp_path / "train.csv", header, rows)
    write_csv(tmp_path / "test.csv", header, rows[:100])
    ckpt = tmp_path / "ckpt"
    first = result(launch(tmp_path, "--model", "linear", "--schema", "auto", "--epochs", "2",
                          "--checkpoint_dir", str(ckpt)))
    manifests = sorted(ckpt.glob("ckpt-*/manifest.json"))
    assert manifests, list(ckpt.iterdir())
    features = json.loads(manifests[-1].read_text())["features"]
    assert features["schema"]["label"] == "bought", features
    assert features["stats"]["rows"] == 600, features
    again = result(launch(tmp_path, "--model", "linear", "--schema", "auto", "--epochs", "2",
                          "--restore_from", str(ckpt)))
    assert again["auc"] >= first["auc"] - 0.02, (first, again)
    write_csv(tmp_path / "train.csv", header, shoppers(600, 5))
    refused(launch(tmp_path, "--model", "linear", "--schema", "auto", "--restore_from",
                   str(ckpt)), "was trained through another transform", "statistics differ at /")
    # The same model over a file's columns as they are (numbers, no header, the label first).
    for name in ("train.csv", "test.csv"):
        (tmp_path / name).write_text("".join("%d,%d,%.1f\n" % (i % 2, i % 7, i / 3.0)
                                             for i in range(200)))
    refused(launch(tmp_path, "--model", "linear", "--restore_from", str(ckpt)),
            "through a schema (--schema)")


def test_criteos_tsv_trains_through_an_inferred_schema(tmp_path):
    """Generated clicks in Criteo's layout (a known logistic model; no header): Wide & Deep
    through an inferred schema (I1 to I13 standardized or coded, C1 to C26 categorical) comes
    within 0.01 AUC of the same model on the same files read as Criteo's fixed layout."""
    clicks = tmp_path / "clicks.tsv"
    gen = subprocess.run([BINARY, "gen-criteo", "--rows", "25000", "--out", str(clicks)],
                         capture_output=True, text=True, timeout=120)
    assert gen.returncode == 0, gen.stderr
    data = ["--data", "criteo:%s" % clicks, "--holdout", "0.2"]  # the last 5,000 rows
    fixed = result(run_cluster(tmp_path, "--model", "wide_deep", *data))
    schema = result(run_cluster(tmp_path, "--model", "wide_deep", "--schema", "auto", *data))
    assert schema["test_examples"] == 5000, schema
    assert schema["auc"] >= fixed["auc"] - 0.01, (schema, fixed)
    assert schema["log_loss"] < schema["base_log_loss"], schema


def shoppers(rows, seed):
    """A table of string categorical columns and numbers whose label follows a known logistic
    model of them: (label, city, device, visits, spend)."""
    rng = np.random.default_rng(seed)
    cities = ["city_%02d" % i for i in range(12)]
    devices = ["phone", "tablet", "desktop"]
    city_w = rng.normal(0, 1.2, len(cities))
    device_w = np.array([-0.8, 0.1, 0.9])
    out = []
    for _ in range(rows):
        c, d = rng.integers(len(cities)), rng.integers(len(devices))
        visits = rng.poisson(4)
        spend = rng.lognormal(3, 1)
        z = city_w[c] + device_w[d] + 0.3 * (visits - 4) + 0.4 * (np.log(spend) - 3) - 0.2
        label = "yes" if rng.random() < 1 / (1 + np.exp(-z)) else "no"
        out.append((label, cities[c], devices[d], int(visits), "%.2f" % spend))
    return out


def test_string_categorical_columns_train_with_an_inferred_and_a_written_schema(tmp_path):
    """Cities and devices as strings: the linear model and wide_deep train on them with the
    inferred schema and with a hand-written one (the spend's log, a device hashed; in YAML and
    in JSON), within 0.01 AUC of a logistic regression on their one-hot codes and the
    standardized numbers; the MLP, which reads them one-hot, within 0.01 of its accuracy."""
    header = ["bought", "city", "device", "visits", "spend"]
    train, test = shoppers(8000, 1), shoppers(4000, 2)
    write_csv(tmp_path / "train.csv", header, train)
    write_csv(tmp_path / "test.csv", header, test)

    # The textbook reference: the categories one-hot, the numbers standardized as they are.
    def features(rows):
        return [[r[1], r[2]] for r in rows], np.array([[r[3], float(r[4])] for r in rows])
    (ctr, ntr), (cte, nte) = features(train), features(test)
    onehot, scaler = OneHotEncoder(handle_unknown="ignore").fit(ctr), StandardScaler().fit(ntr)
    Xtr = np.hstack([onehot.transform(ctr).toarray(), scaler.transform(ntr)])
    Xte = np.hstack([onehot.transform(cte).toarray(), scaler.transform(nte)])
    ytr, yte = np.array([r[0] == "yes" for r in train]), np.array([r[0] == "yes" for r in test])
    lr = LogisticRegression(max_iter=1000).fit(Xtr, ytr)
    reference = roc_auc_score(yte, lr.predict_proba(Xte)[:, 1])
    reference_accuracy = accuracy_score(yte, lr.predict(Xte))
    written = tmp_path / "schema.json"
    written.write_text(json.dumps({
        "label": "bought", "task": "classification",
        "columns": [{"name": "city", "type": "categorical", "encoding": "vocabulary"},
                    {"name": "device", "type": "categorical", "encoding": "hash",
                     "hash_buckets": 64},
                    {"name": "visits", "type": "numeric", "normalizer": "standardize"},
                    {"name": "spend", "type": "numeric", "normalizer": "log1p"}]}))
    # The same schema as a user writes it in YAML.
    written_yaml = tmp_path / "schema.yaml"
    written_yaml.write_text("""# what a shopper bought
label: bought
task: classification
columns:
  - {name: city, type: categorical, encoding: vocabulary}
  - {name: device, type: categorical, encoding: hash, hash_buckets: 64}
  - name: visits
    type: numeric
    normalizer: standardize
  - name: spend
    type: numeric
    normalizer: log1p
""")
    for model, schema in (("linear", "auto"), ("linear", str(written_yaml)),
                          ("wide_deep", "auto"), ("mlp", "auto"), ("mlp", str(written))):
        got = result(launch(tmp_path, "--model", model, "--schema", schema))
        assert got["test_examples"] == len(test), got
        if model == "mlp":  # a classifier of any number of classes: its accuracy
            assert got["test_accuracy"] >= reference_accuracy - 0.01, (schema, got)
        else:
            assert got["auc"] >= reference - 0.01, (model, schema, got, reference)


def refused(r, *parts):
    assert r.returncode != 0, r.stdout
    for p in parts:
        assert p in r.stderr, (p, r.stderr[-3000:])


def test_every_bad_input_of_a_schema_is_refused_naming_what_is_wrong(tmp_path):
    header = ["bought", "city", "device", "visits", "spend"]
    rows = shoppers(200, 3)
    write_csv(tmp_path / "train.csv", header, rows)
    write_csv(tmp_path / "test.csv", header, rows[:50])
    schema = tmp_path / "schema.json"

    # A schema naming a column the data lacks.
    schema.write_text(json.dumps({"label": "bought", "columns": [
        {"name": "country", "type": "categorical"}]}))
    refused(launch(tmp_path, "--model", "linear", "--schema", str(schema)), "country",
            str(tmp_path / "train.csv"))
    # A schema file that is not there, or not a schema.
    refused(launch(tmp_path, "--model", "linear", "--schema", str(tmp_path / "none.json")),
            "--schema %s: cannot open" % (tmp_path / "none.json"))
    schema.write_text('{"label": "bought", "colums": []}')
    refused(launch(tmp_path, "--model", "linear", "--schema", str(schema)), "colums")
    schema.write_text('label: bought\ncolumns: [{name: city}]\n')
    refused(launch(tmp_path, "--model", "linear", "--schema", str(schema)),
            "--schema %s: not valid JSON" % schema, "*.yaml or *.yml")
    yaml_schema = tmp_path / "schema.yaml"
    yaml_schema.write_text('label: bought\ncolumns: [{name: city, type: categorical}\n')
    refused(launch(tmp_path, "--model", "linear", "--schema", str(yaml_schema)),
            "--schema %s: not valid YAML at line 3, column 1" % yaml_schema)
    yaml_schema.write_text('label: bought\ncolumns: [{name: city, type: categorical}]\n'
                           'label: city\n')
    refused(launch(tmp_path, "--model", "linear", "--schema", str(yaml_schema)),
            'key "label" is given twice')
    # A test file with a class the training rows never had, at its line and column.
    write_csv(tmp_path / "test.csv", header, rows[:5] + [("maybe",) + rows[5][1:]] + rows[6:20])
    refused(launch(tmp_path, "--model", "linear", "--schema", "auto"),
            "%s:7" % (tmp_path / "test.csv"), "bought", "maybe", "never had")
    # A value that is not a number in a numeric column of the training file.
    bad = rows[:30] + [rows[30][:3] + ("many",) + rows[30][4:]] + rows[31:]
    write_csv(tmp_path / "train.csv", header, bad)
    write_csv(tmp_path / "test.csv", header, rows[:50])
    schema.write_text(json.dumps({"label": "bought", "columns": [
        {"name": "visits", "type": "numeric"}, {"name": "city", "type": "categorical"}]}))
    refused(launch(tmp_path, "--model", "linear", "--schema", str(schema)),
            "%s:32" % (tmp_path / "train.csv"), "visits", "many", "not a finite number")
    # ... skipped and counted under --bad_lines skip.
    got = result(launch(tmp_path, "--model", "linear", "--schema", str(schema), "--bad_lines",
                        "skip"))
    assert got["test_examples"] == 50, got
    # Models the table does not fit, and data that is not CSV.
    write_csv(tmp_path / "train.csv", header, rows)
    crossed = json.loads(schema.read_text())
    crossed["columns"].append({"name": "device", "type": "categorical"})
    crossed["crosses"] = [{"columns": ["city", "device"], "hash_buckets": 50}]
    schema.write_text(json.dumps(crossed))
    refused(launch(tmp_path, "--model", "mlp", "--schema", str(schema)),
            "model mlp reads dense inputs", "1 crossed columns")
    # A column of too many ids to go one-hot into an MLP.
    schema.write_text(json.dumps({"label": "bought", "columns": [
        {"name": "city", "type": "categorical", "encoding": "hash", "hash_buckets": 100000}]}))
    refused(launch(tmp_path, "--model", "mlp", "--schema", str(schema)),
            "column \"city\" has 100000 ids: more than an indicator's 4095")
    write_csv(tmp_path / "train.csv", ["y", "x"], [(i % 3, i * 0.5) for i in range(100)])
    write_csv(tmp_path / "test.csv", ["y", "x"], [(i % 3, i * 0.5) for i in range(30)])
    refused(launch(tmp_path, "--model", "linear", "--schema", "auto"),
            "model linear is a binary classifier; the label has 3 classes")
    # A regression target that is not a number, at its line; a --label the header lacks.
    write_csv(tmp_path / "train.csv", ["y", "x"], [(i * 0.25, i * 0.5) for i in range(100)])
    write_csv(tmp_path / "test.csv", ["y", "x"], [(1.5, 1), ("high", 2)])
    refused(launch(tmp_path, "--model", "linear", "--schema", "auto"),
            "%s:3" % (tmp_path / "test.csv"), "high", "is not a number")
    refused(launch(tmp_path, "--model", "linear", "--schema", "auto", "--label", "z"),
            "no column \"z\"", "y,x")
    r = subprocess.run([BINARY, "launch", "--ps", "1", "--workers", "1", "--data",
                        "idx:%s" % tmp_path, "--schema", "auto"],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    refused(r, "--schema reads CSV files (csv:PATH), LibSVM files", "not idx:")
