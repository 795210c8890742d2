"""LICENSE and CITATION.cff: the license is MIT and named the same in both; the citation file has the keys of the
Citation File Format 1.2.0 and lists exactly the five papers the README names, by title and arXiv id."""
import os
import re

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(name):
    with open(os.path.join(REPO, name), encoding="utf-8") as f:
        return f.read()


def test_the_license_is_mit_and_the_citation_file_says_so():
    license_text = read("LICENSE")
    assert license_text.startswith("MIT License\n") and "the looped-lm authors" in license_text
    assert "THE SOFTWARE IS PROVIDED \"AS IS\"" in license_text
    cff = yaml.safe_load(read("CITATION.cff"))
    assert cff["license"] == "MIT"
    assert {"cff-version", "message", "title", "authors", "type", "references"} <= cff.keys()
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["authors"] == [{"name": "the looped-lm authors"}]


def test_the_citation_file_lists_the_five_papers_of_the_readme():
    cff = yaml.safe_load(read("CITATION.cff"))
    papers = read("README.md").split("## Set-up")[0]
    readme_ids = set(re.findall(r"arXiv:(\d{4}\.\d{5})", papers))
    assert len(readme_ids) == 5
    cited = {}
    for ref in cff["references"]:
        assert {"type", "title", "authors", "year", "identifiers", "url"} <= ref.keys(), ref.get("title")
        (arxiv,) = [i["value"] for i in ref["identifiers"] if i["value"].startswith("arXiv:")]
        cited[arxiv[len("arXiv:"):]] = ref
        assert ref["url"] == f"https://arxiv.org/abs/{arxiv[len('arXiv:'):]}" and ref["year"] == 2026
        assert all("family-names" in a or "name" in a for a in ref["authors"])
        assert " ".join(ref["title"].split()) in " ".join(papers.replace("*", "").split()), ref["title"]
    assert set(cited) == readme_ids
