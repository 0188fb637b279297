"""Tests of scripts/check-docs.py: reading the Markdown, comparing answers, whole runs.

    python3 -m unittest discover -s scripts/check-docs-tests

The runs need redis-server, curl and the gateway binary (LOCKGATE_BIN,
default target/release/lockgate); they fail, not skip, without them.
"""

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parent / "check-docs.py"
FIXTURE = HERE / "fixtures" / "agrees.md"

spec = importlib.util.spec_from_file_location("check_docs", SCRIPT)
assert spec is not None and spec.loader is not None
check_docs = importlib.util.module_from_spec(spec)
sys.modules["check_docs"] = check_docs  # dataclasses look their module up
spec.loader.exec_module(check_docs)


class ReadingTheMarkdown(unittest.TestCase):
    def test_a_marked_block_gives_its_commands_their_lines_and_their_output(self):
        text = "\n".join([
            "Intro.",
            "",
            "<!-- check -->",
            "```console",
            "$ curl -s localhost:8080/a \\",
            "    -H 'x: y'          # asks",
            "{\"a\": 1}            # answers",
            "                      # a line of only a comment",
            "$ curl -sN localhost:8080/b",
            "event: x",
            "data: {}",
            "",
            "^C",
            "```",
        ])
        [block] = check_docs.read_blocks("doc.md", text)
        self.assertEqual((block.kind, block.line), ("check", 3))
        first, second = block.commands
        self.assertEqual(first.line, 5)
        self.assertEqual(first.text, "curl -s localhost:8080/a \\\n    -H 'x: y'          # asks")
        self.assertEqual(first.output, ['{"a": 1}'])
        self.assertFalse(first.interrupt)
        self.assertEqual((second.line, second.output, second.interrupt), (9, ["event: x", "data: {}"], True))

    def test_skip_and_restart_marks_are_kept_with_their_notes(self):
        text = "\n".join([
            "<!-- check skip: needs nginx -->",
            "```console",
            "$ curl localhost:8090/",
            "```",
            "<!-- check restart: LOCKGATE_X=$(cat f) -->",
            "```sh",
            "LOCKGATE_X=$(cat f) make run",
            "```",
        ])
        skip, restart = check_docs.read_blocks("doc.md", text)
        self.assertEqual((skip.kind, skip.note), ("skip", "needs nginx"))
        self.assertEqual((restart.kind, restart.note), ("restart", "LOCKGATE_X=$(cat f)"))

    def test_a_console_block_without_a_mark_is_refused_with_its_line(self):
        text = "Words.\n\n```console\n$ curl localhost:8080/\n```\n"
        with self.assertRaisesRegex(check_docs.DocsError, r"doc\.md:3.*<!-- check -->"):
            check_docs.read_blocks("doc.md", text)

    def test_a_console_block_without_commands_needs_no_mark(self):
        self.assertEqual(check_docs.read_blocks("doc.md", "```console\nplain text\n```\n"), [])

    def test_a_mark_not_followed_by_a_console_block_is_refused(self):
        with self.assertRaisesRegex(check_docs.DocsError, r"doc\.md:1: the mark"):
            check_docs.read_blocks("doc.md", "<!-- check -->\nWords.\n")
        with self.assertRaisesRegex(check_docs.DocsError, r"doc\.md:1: the mark"):
            check_docs.read_blocks("doc.md", "<!-- check -->\n```sh\n$ ls\n```\n")

    def test_an_answer_that_cannot_be_read_is_refused_with_its_line(self):
        text = "<!-- check -->\n```console\n$ true\n$ curl localhost:8080/\n{\"a\": 1,,}\n```\n"
        with self.assertRaisesRegex(check_docs.DocsError, r"doc\.md:4: the answer shown cannot be read"):
            check_docs.read_blocks("doc.md", text)


class ComparingAnswers(unittest.TestCase):
    def differences(self, shown, printed):
        return check_docs.compare(shown.split("\n"), printed).differences

    def test_shown_json_takes_ellipses_for_members_elements_and_values(self):
        value = check_docs.ShownJson.parse('{"a": ..., "b": [1, ...], ...}')
        self.assertIsInstance(value, check_docs.OpenObject)
        self.assertIs(value["a"], check_docs.ANYTHING)
        self.assertIsInstance(value["b"], check_docs.OpenArray)
        self.assertEqual(check_docs.ShownJson.parse('{"a": [true, null, "x"]}'), {"a": [True, None, "x"]})
        with self.assertRaises(ValueError):
            check_docs.ShownJson.parse('{"a": 1} trailing')

    def test_json_compares_field_names_and_types_not_values(self):
        self.assertEqual(self.differences('{"token": "t-1", "n": 1, "at": null}',
                                          '{"token": "t-2", "n": 99, "at": null}'), [])
        self.assertEqual(self.differences('{"a": 1}', '{"a": 1, "b": 2}'),
                         ["$: the gateway's answer has the field 'b', which the docs do not show"])
        self.assertEqual(self.differences('{"a": 1, "b": 2}', '{"a": 1}'),
                         ["$: the docs show the field 'b', the gateway's answer has none"])
        self.assertEqual(self.differences('{"a": 1, ...}', '{"a": 1, "b": 2}'), [])
        [difference] = self.differences('{"a": {"b": "1"}}', '{"a": {"b": 1}}')
        self.assertTrue(difference.startswith("$.a.b: the docs show a string, the gateway answered a number"))
        self.assertEqual(self.differences('{"held": true}', '{"held": false}'),
                         ["$.held: the docs show true, the gateway answered false"])
        self.assertEqual(self.differences('{"w": [{"p": 1}]}', '{"w": []}'),
                         ["$.w: the docs show 1 element(s), the gateway answered 0"])

    def test_a_problem_compares_its_type_and_status_as_values(self):
        shown = '{"type": "/problems/lock-held", "status": 409, "detail": "held"}'
        self.assertEqual(self.differences(shown, shown.replace("held\"}", "other\"}")), [])
        self.assertEqual(self.differences(shown, shown.replace("409", "410")),
                         ["$.status: the docs show 409, the gateway answered 410"])
        self.assertEqual(self.differences(shown, shown.replace("lock-held", "not-owner")),
                         ['$.type: the docs show "/problems/lock-held", '
                          'the gateway answered "/problems/not-owner"'])

    def test_http_compares_the_status_the_headers_shown_and_the_body(self):
        printed = "HTTP/1.1 200 OK\r\nx-instance-id: a\r\ncontent-type: application/json\r\n\r\n{\"holds\":1}"
        shown = "HTTP/1.1 200 OK\nx-instance-id: b:8080\n{\"holds\":3}"
        self.assertEqual(self.differences(shown, printed), [])
        self.assertEqual(self.differences("HTTP/1.1 204 No Content", printed),
                         ["status: the docs show 204, the gateway answered 200"])
        self.assertEqual(self.differences("HTTP/1.1 200 OK\nidempotent-replayed: true", printed),
                         ["header: the docs show idempotent-replayed, the gateway's answer has none"])
        self.assertEqual(self.differences("HTTP/1.1 200 OK\n{\"key\":\"k\"}", printed),
                         ["$: the docs show the field 'key', the gateway's answer has none",
                          "$: the gateway's answer has the field 'holds', which the docs do not show"])

    def test_events_are_compared_in_order_and_more_may_follow(self):
        shown = 'event: acquired\ndata: {"key":"k",\n       "holds":1}\n\nevent: renewed\ndata: {"at":1}'
        printed = ': watching\n\nevent: acquired\ndata: {"key":"x","holds":2}\n\n' \
                  'event: renewed\ndata: {"at":5}\n\nevent: renewed\ndata: {"at":6}\n\n'
        self.assertEqual(self.differences(shown, printed), [])
        self.assertEqual(self.differences(shown.replace("renewed", "released"), printed),
                         ["event 2: the docs show `released`, the stream sent `renewed`"])
        self.assertEqual(self.differences(shown, printed.split("event: renewed")[0]),
                         ["event 2: the docs show `renewed`, the stream sent no more events"])
        self.assertEqual(self.differences(shown.replace('"holds":1', '"holds":1,"value":null'), printed),
                         ["event 1 (acquired) $: the docs show the field 'value', "
                          "the gateway's answer has none"])

    def test_text_is_compared_line_by_line_but_for_long_numbers_and_uuids(self):
        shown = "phone epoch=1795628599241 sold=1 ok\n19846617-126c-4f0c-b8fe-d551002edf42|u-17"
        self.assertEqual(self.differences(shown, "phone epoch=1795691546473 sold=1 ok\n"
                                                 "ce3b36e2-87fc-4242-b51d-b9f834515882|u-17\n"), [])
        self.assertEqual(len(self.differences(shown, "phone epoch=1795691546473 sold=2 ok\nx|u-17")), 1)
        self.assertEqual(self.differences("1", "0"), ["line 1: the docs show '1', the terminal shows '0'"])
        self.assertEqual(self.differences("1", ""),
                         ["line 1: the docs show '1', the terminal shows '(nothing)'"])

    def test_the_tokens_shown_stand_for_the_ones_given(self):
        outcome = check_docs.compare(['{"token":"5c0f4e1e-aaaa","key":"k","t":"..."}'],
                                     '{"token":"real-token-1","key":"k","t":"x"}')
        self.assertEqual(outcome.strings, [("5c0f4e1e-aaaa", "real-token-1")])


class Commands(unittest.TestCase):
    def test_a_command_ending_in_ampersand_runs_in_the_background(self):
        self.assertTrue(check_docs.in_background("curl -sN localhost:8080/e &   # a watcher"))
        self.assertTrue(check_docs.in_background("curl -sN x \\\n    >f & leader=$!     # leads"))
        self.assertFalse(check_docs.in_background("curl -s 'a&b'"))
        self.assertFalse(check_docs.in_background("echo '# not a comment &'"))

    def test_only_reads_are_run_again(self):
        self.assertTrue(check_docs.is_read("curl -s localhost:8080/locks/a"))
        self.assertTrue(check_docs.is_read("curl -s localhost:8080/seckill/phone/orders -H 'a: b'"))
        self.assertTrue(check_docs.is_read("sqlite3 .run/orders.db 'SELECT 1'"))
        self.assertTrue(check_docs.is_read("./target/release/lockgate orders reconcile --database x"))
        self.assertFalse(check_docs.is_read("curl -s -XPOST localhost:8080/locks -d '{}'"))
        self.assertFalse(check_docs.is_read("curl -si -XDELETE localhost:8080/locks/a"))
        self.assertFalse(check_docs.is_read("curl -s localhost:8080/x -d '{}'"))
        self.assertFalse(check_docs.is_read("curl -sN localhost:8080/locks/a/events &"))
        self.assertFalse(check_docs.is_read("kill $leader"))


class WholeRuns(unittest.TestCase):
    """The script against a real gateway: the fixture as it is, then changed."""

    @classmethod
    def setUpClass(cls):
        binary = os.environ.get("LOCKGATE_BIN") or str(HERE.parent.parent / "target" / "release" / "lockgate")
        if not Path(binary).is_file():
            raise AssertionError(f"no gateway binary at {binary}: build it, or set LOCKGATE_BIN")
        cls.env = dict(os.environ, LOCKGATE_BIN=binary)
        cls.text = FIXTURE.read_text()

    def run_on(self, text, preexec_fn=None):
        with tempfile.TemporaryDirectory() as scratch:
            doc = Path(scratch) / "changed.md"
            doc.write_text(text)
            # A failed run keeps its scratch directory: here, in this one.
            done = subprocess.run([sys.executable, str(SCRIPT), str(doc)],
                                  env=dict(self.env, TMPDIR=scratch), preexec_fn=preexec_fn,
                                  capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout + done.stderr

    def line_of(self, text, command_start):
        return next(number for number, line in enumerate(text.split("\n"), 1)
                    if line.startswith("$ " + command_start))

    def test_the_fixture_as_it_is_agrees(self):
        status, printed = self.run_on(self.text)
        self.assertEqual(status, 0, printed)
        self.assertIn("7 commands in 2 blocks agree with the gateway; 1 block skipped "
                      "(line 39: a gateway the test does not start)", printed)

    def test_it_agrees_started_as_a_background_job_with_sigint_ignored(self):
        # `make test &`, nohup and some CI runners start it so: the ^C it
        # sends a streamed curl must still end that curl.
        def ignore_sigint():
            signal.signal(signal.SIGINT, signal.SIG_IGN)

        status, printed = self.run_on(self.text, preexec_fn=ignore_sigint)
        self.assertEqual(status, 0, printed)

    def test_a_change_in_the_docs_fails_naming_the_line_and_what_differs(self):
        changes = [
            ("HTTP/1.1 204 No Content", "HTTP/1.1 200 OK", "curl -si -XDELETE",
             "status: the docs show 200, the gateway answered 204"),
            ('"status":409', '"status":410', "curl -s -XPOST localhost:8080/locks "
             """-H 'content-type: application/json' -d '{"key": "fixture:1"}'""",
             "$.status: the docs show 410, the gateway answered 409"),
            ('"fencing_token":1795477391026342,...}', '"fencing_token":"1795477391026342",...}',
             "curl -s -XPOST", "$.fencing_token: the docs show a string, the gateway answered a number"),
            ('"holders":1,', "", "curl -s localhost:8080/locks/fixture:1 ",
             "$: the gateway's answer has the field 'holders', which the docs do not show"),
            ("event: renewed", "event: released", "curl -sN",
             "event 2: the docs show `released`, the stream sent `renewed`"),
            ("1724744175, 3 holders", "1724744175, 4 holders", "echo",
             "line 1: the docs show 'fencing token 1795691724744175, 4 holders'"),
        ]
        for old, new, command, message in changes:
            with self.subTest(change=new):
                self.assertEqual(self.text.count(old), 1)
                text = self.text.replace(old, new)
                line = self.line_of(text, command)
                status, printed = self.run_on(text)
                self.assertEqual(status, 1, printed)
                self.assertIn(f"changed.md:{line}: the answer is not what the docs show", printed)
                self.assertIn(message, printed)

    def test_a_console_block_without_a_mark_fails_before_anything_runs(self):
        text = self.text.replace("<!-- check skip: a gateway the test does not start -->\n", "")
        status, printed = self.run_on(text)
        self.assertEqual(status, 1, printed)
        self.assertIn("console blocks without a mark: ", printed)
        self.assertNotIn("agree with the gateway", printed)


if __name__ == "__main__":
    unittest.main()
