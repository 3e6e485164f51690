# gnuplot script for scripts/soak.sh: four stacked panels over time (RSS,
# open fds, coroutines and connections, requests per second) from the
# soak CSV, with the end of the warm-up marked.
#
#   gnuplot -e "csv='build/soak/soak.csv'; png='build/soak/soak.png'; warm=12" \
#           scripts/soak/plot.gp
#
# Columns by name, as scripts/soak/sample.lua writes them.

if (!exists("warm")) warm = 0
set terminal pngcairo size 1000,1100 font ",10"
set output png
set datafile separator ","
set key autotitle columnhead top right
set grid
set xlabel "seconds"
set multiplot layout 4,1 title "cohost soak: ".csv

set arrow 1 from warm, graph 0 to warm, graph 1 nohead dashtype 2 lc rgb "gray40"
set label 1 "warm-up ends" at warm, graph 0.06 offset 1,0 tc rgb "gray40"

set ylabel "RSS (MiB)"
plot csv using "t":(column("rss_kb")/1024.0) with lines lw 2 title "RSS, process tree"

set ylabel "descriptors"
plot csv using "t":"fds" with lines lw 2 title "open fds"

set ylabel "count"
plot csv using "t":"coros" with lines lw 2 title "coroutines", \
     csv using "t":"connections" with lines title "connections"

# Requests per second: the difference of the requests counter between two
# samples; a counter that went down (a reload) gives no point.
prev_r = NaN
prev_t = NaN
rate(t, r) = (d = (r >= prev_r && t > prev_t) ? (r - prev_r) / (t - prev_t) : NaN, \
              prev_r = r, prev_t = t, d)
set ylabel "requests/s"
plot csv using "t":(rate(column("t"), column("requests"))) with lines title "HTTP requests/s"

unset multiplot
