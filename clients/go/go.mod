module lockgate

go 1.19
