module github.com/kahunago/kahuna/fence

go 1.26.0
