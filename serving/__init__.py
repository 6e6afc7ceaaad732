"""What every roost server shares: binding a listening socket (port 0: the OS picks) and
reporting the port it got, the handles launchers give back (`ServerHandle`), reading a request
body within a size limit (`body`) and the bounds on the JSON taken in (`json_bounds`)."""
