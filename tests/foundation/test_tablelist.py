"""A user's table-list file is a workload; a missing column is named."""
import pytest

from benchmarks.compose import compose_workload
from embedding.spec import SpecError
from embedding.tablelist import load_table_list


def test_csv_and_yaml_table_lists(tmp_path):
    csv = tmp_path / "tables.csv"
    csv.write_text("name,rows,dim,pooling,alpha\nusers,1000000,64,1,1.1\nitems,5000,32,12.5,\n")
    yml = tmp_path / "tables.yaml"
    yml.write_text("tables:\n  - {name: users, rows: 1000000, dim: 64, pooling: 1, alpha: 1.1}\n"
                   "  - {name: items, rows: 5000, dim: 32, pooling: 12.5}\n")
    a, b = load_table_list(csv), load_table_list(yml)
    assert a == b
    assert a[0].access.kind == "zipf" and a[0].access.alpha == 1.1 and a[1].access.kind == "uniform"
    assert a[1].pooling.expected == 12.5 and a[0].pooling.kind == "fixed"
    spec = compose_workload(["workload=trace", f"workload.table_list={csv}", "workload.trace=null",
                             "workload.num_batches=1"])
    assert [t.name for t in spec.tables] == ["users", "items"]


def test_missing_column_is_named(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("name,rows,pooling\na,10,1\n")
    with pytest.raises(SpecError, match=r"missing column\(s\) \['dim'\]"):
        load_table_list(csv)
    yml = tmp_path / "t.yaml"
    yml.write_text("- {name: a, rows: 10, dim: 4}\n")
    with pytest.raises(SpecError, match=r"entry 0: missing column\(s\) \['pooling'\]"):
        load_table_list(yml)


def test_bad_values_are_named(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("name,rows,dim,pooling\na,-5,4,1\n")
    with pytest.raises(SpecError, match="rows must be a positive"):
        load_table_list(csv)
    csv.write_text("name,rows,dim,pooling\na,ten,4,1\n")
    with pytest.raises(SpecError, match="non-numeric"):
        load_table_list(csv)
