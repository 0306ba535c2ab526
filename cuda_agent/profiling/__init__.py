"""Tools that wrap one forward of a candidate in a whole process: ncu (profile), compute-sanitizer
(sanitize), and where a kernel sits on the roofline. Parsers are pure text -> records, so they are
tested on captured output without a GPU."""
