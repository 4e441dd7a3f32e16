"""Sessions against the real sandboxd: state kept between calls, a PNG
figure and a DataFrame table, files up and down, the end on exit."""

import pytest

import sandboxd

PNG = b"\x89PNG\r\n\x1a\n"


def test_data_session_with_a_figure_a_table_and_files(client):
    with client.session(profile="data", idle_timeout_s=120) as s:
        assert s.id.startswith("ses_") and s.info.state == "ready" and s.info.profile.name == "data"
        r = s.run("import pandas as pd\ndf = pd.DataFrame({'n': [1, 4, 9]})\ndf.plot()\ndf")
        assert r.status == "ok" and r.session_state == "ready", r
        assert len(r.tables) == 1 and r.tables[0].split()[:7] == ["n", "0", "1", "1", "4", "2", "9"], r.tables
        assert len(r.images) == 1 and r.images[0].startswith(PNG)
        fig = next(x for x in r.results if x.is_image)
        assert fig.width > 0 and fig.height > 0 and fig.size == len(fig.data)

        assert s.run("int(df['n'].sum())").value == "14"

        refs = s.upload({"in/table.csv": "a,b\n1,2\n3,4\n"})
        assert [(f.path, f.size) for f in refs] == [("in/table.csv", 12)]
        r = s.run("import os\nos.makedirs('out', exist_ok=True)\n"
                  "pd.read_csv('in/table.csv').sum().to_csv('out/sums.csv')")
        assert r.ok, r.stderr
        assert s.download("out/sums.csv").content == b",0\na,4\nb,6\n"
        with pytest.raises(sandboxd.NotFound):
            s.download("out/none.csv")

        r = s.run("1/0")
        assert r.status == "error" and r.exception.type == "ZeroDivisionError" and "ZeroDivisionError" in r.stderr
        assert s.refresh().usage.calls == 4
        sid = s.id
    assert s.info.ended and client.get_session(sid).state == "ended"
    with pytest.raises(sandboxd.SessionEnded):
        s.run("print(1)")


def test_session_ends_on_exit_even_after_an_exception(client):
    with pytest.raises(RuntimeError):
        with client.session() as s:
            assert s.run("x = 41").ok
            assert s.run("x + 1").value == "42"
            raise RuntimeError("the agent failed")
    assert client.get_session(s.id).ended
