

def test_snapshots_taken_with_different_tables_compare_by_what_they_mean():
    """A snapshot taken when the token indices had a usual dtype (int32, written as values) and
    one taken after (every dtype stated) hold the same tensor: no drift; a dtype that moved is
    still named."""
    from gdn_review.common import snapshots

    before = {"case": {"spec_token_indx": [0, 1], "num_decodes": 0}}
    usual_before = {"spec_token_indx": "int32"}
    same = {"case": {"spec_token_indx": {"dtype": "int32", "values": [0, 1]}, "num_decodes": 0}}
    assert snapshots.differences(before, same, usual_before, {}) == []
    moved = {"case": {"spec_token_indx": {"dtype": "int64", "values": [0, 1]}, "num_decodes": 0}}
    (row,) = snapshots.differences(before, moved, usual_before, {})
    assert (row["field"], row["change"]) == ("spec_token_indx", "dtype int32 → int64")
