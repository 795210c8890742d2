"""Self-check of COURSE.md's Lecture 10 exercise: a generated probe whose answer is the words reversed.

The exercise: add a probe "reverse_words" to eval.py: a random sequence of six words, then "Reversed:", and as the
gold continuation the same words in reverse order. This script reads the probe's documents and checks them against
their own query:

  1. eval.PROBES and eval.TASKS have "reverse_words";
  2. every document's answer is its query's six words in reverse order;
  3. the documents are seeded: the same seed gives the same ones, another seed others;
  4. eval.py can build its request: the query as context, the answer as the continuation.

    python course/exercises/10_reverse_probe_check.py [project folder]   # default: this repository

One thread, a few seconds.
"""
import sys

from selfcheck import Checks, use_project


def main(argv):
    use_project(argv)
    import eval as ev
    check = Checks()
    if not check('1. eval.PROBES and eval.TASKS have "reverse_words"',
                 lambda: ("reverse_words" in ev.PROBES and "reverse_words" in ev.TASKS, "")):
        check.not_run(["2. reversed", "3. seeded", "4. requests"], "check 1 failed")
        return check.status()
    docs = ev.probe_docs("reverse_words", 20, 0)

    def reversed_words():
        for doc in docs:
            words = doc["query"].split("\n")[0].split()
            if len(words) != 6 or doc["answer"].split() != words[::-1]:
                return False, f"query {doc['query']!r}, answer {doc['answer']!r}"
        return True, ""

    check("2. each answer is its query's six words in reverse order", reversed_words)

    def seeded():
        again, other = ev.probe_docs("reverse_words", 20, 0), ev.probe_docs("reverse_words", 20, 1)
        return again == docs and other != docs, "" if again == docs else "the same seed gave other documents"

    check("3. the same seed gives the same documents, another seed others", seeded)

    def requests():
        (context, continuation), = ev.requests(ev.TASKS["reverse_words"], docs[0])
        ok = context.endswith(docs[0]["query"]) and continuation.strip() == docs[0]["answer"]
        return ok, f"context ...{context[-40:]!r}, continuation {continuation!r}"

    check("4. eval.py's requests build from them", requests)
    return check.status()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
