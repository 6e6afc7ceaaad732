"""What every roost server shares: binding a listening socket (port 0: the OS picks) and
reporting the port it got, and the handles launchers give back (`ServerHandle`)."""
